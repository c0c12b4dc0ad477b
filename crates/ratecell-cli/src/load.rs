//! Offered traffic: when requests arrive, for the shapes `simulate` offers
//! and the traffic `compare` measures with. Arrival times are offsets in ns
//! from the start of a run, sorted; everything is reproducible from a seed.

/// The shape of the offered load over time (the `--load` values; each
/// variant's first doc line is its help).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// Evenly spaced at the rate
    Constant,
    /// 5x the rate for the first fifth of each cycle, then silent
    Bursts,
    /// Independent exponential gaps (a Poisson process) at the rate
    Poisson,
    /// Rising linearly from 0 to twice the rate over the run
    Ramp,
}

impl Shape {
    /// The `--load` name.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Constant => "constant",
            Shape::Bursts => "bursts",
            Shape::Poisson => "poisson",
            Shape::Ramp => "ramp",
        }
    }
}

/// An offered load: a shape, an average rate and a length.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// The shape.
    pub shape: Shape,
    /// Average requests per second.
    pub rate: f64,
    /// How long requests keep arriving, ns.
    pub duration_ns: u64,
    /// The on/off cycle of [`Shape::Bursts`], ns.
    pub cycle_ns: u64,
    /// Seeds [`Shape::Poisson`].
    pub seed: u64,
}

impl Load {
    /// How many requests the load offers on average.
    pub fn expected_requests(&self) -> f64 {
        self.rate * self.duration_ns as f64 / 1e9
    }

    /// Arrival offsets in `[0, duration)`, sorted.
    pub fn arrivals(&self) -> Vec<u64> {
        let d = self.duration_ns as f64;
        let mut out = Vec::with_capacity(self.expected_requests().ceil() as usize + 1);
        match self.shape {
            Shape::Poisson => {
                let per_ns = self.rate / 1e9;
                let mut rng = SplitMix64::new(self.seed);
                let mut t = rng.exponential(per_ns);
                while t < d {
                    out.push(t as u64);
                    t += rng.exponential(per_ns);
                }
            }
            // The deterministic shapes put the k-th arrival where the
            // cumulative offered count first reaches k.
            _ => {
                for k in 0u64.. {
                    let t = self.inverse_cumulative(k as f64);
                    if t >= d {
                        break;
                    }
                    out.push(t as u64);
                }
            }
        }
        out
    }

    /// The time (ns) at which the cumulative offered count reaches `k`.
    /// Computed as `k · 10^9 / rate` rather than `k / (rate / 10^9)`, so a
    /// time that is a whole number of ns comes out exact (8 per second for
    /// 2 s is 16 requests, not 17).
    fn inverse_cumulative(&self, k: f64) -> f64 {
        let ns_per_request = |k: f64, rate: f64| k * 1e9 / rate;
        match self.shape {
            Shape::Constant | Shape::Poisson => ns_per_request(k, self.rate),
            Shape::Bursts => {
                // Each cycle offers rate·cycle, all in its first fifth.
                let cycle = self.cycle_ns as f64;
                let per_cycle = self.rate * cycle / 1e9;
                let c = (k / per_cycle).floor();
                let within = k - c * per_cycle;
                c * cycle + ns_per_request(within, 5.0 * self.rate)
            }
            // λ(t) = 2·r·t/d, so the cumulative count is r·t²/d.
            Shape::Ramp => (ns_per_request(k, self.rate) * self.duration_ns as f64).sqrt(),
        }
    }
}

/// A small, fast, seedable generator (SplitMix64): reproducible runs need
/// the same numbers on every platform, which an external crate's default
/// generator does not promise across versions.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1]: never 0, so its logarithm is finite.
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// An exponential gap with rate `per_ns` (mean `1/per_ns`).
    pub fn exponential(&mut self, per_ns: f64) -> f64 {
        -self.unit().ln() / per_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(shape: Shape) -> Load {
        Load {
            shape,
            rate: 20.0,
            duration_ns: 10_000_000_000,
            cycle_ns: 1_000_000_000,
            seed: 7,
        }
    }

    #[test]
    fn every_shape_offers_the_average_rate() {
        for shape in [Shape::Constant, Shape::Bursts, Shape::Poisson, Shape::Ramp] {
            let a = load(shape).arrivals();
            let n = a.len() as f64;
            assert!((n - 200.0).abs() <= 30.0, "{shape:?} offered {n}");
            assert!(a.windows(2).all(|w| w[0] <= w[1]), "{shape:?} unsorted");
            assert!(a.iter().all(|&t| t < 10_000_000_000));
        }
        assert_eq!(load(Shape::Constant).arrivals().len(), 200);
        let mut eight = load(Shape::Constant);
        (eight.rate, eight.duration_ns) = (8.0, 2_000_000_000);
        assert_eq!(
            eight.arrivals().len(),
            16,
            "the arrival at exactly 2 s is outside"
        );
    }

    #[test]
    fn bursts_are_on_for_a_fifth_of_each_cycle() {
        let a = load(Shape::Bursts).arrivals();
        assert!(a.iter().all(|t| t % 1_000_000_000 < 200_000_000));
        let ramp = load(Shape::Ramp).arrivals();
        let first_half = ramp.iter().filter(|&&t| t < 5_000_000_000).count();
        assert!(
            first_half * 3 < ramp.len(),
            "a ramp offers a quarter in its first half"
        );
    }

    #[test]
    fn poisson_is_reproducible_from_its_seed() {
        assert_eq!(
            load(Shape::Poisson).arrivals(),
            load(Shape::Poisson).arrivals()
        );
        let mut other = load(Shape::Poisson);
        other.seed = 8;
        assert_ne!(load(Shape::Poisson).arrivals(), other.arrivals());
    }
}
