//! Leased checks that find units, in a loop of their own for callgrind:
//! what a node pays per check once its grants are in hand (SPEC §8), in
//! instructions, which a busy machine does not change.
//!
//! ```sh
//! cargo build --release --example lease_hot
//! valgrind --tool=callgrind --toggle-collect='lease_hot::measured*' \
//!     target/release/examples/lease_hot fixed_window 1024 200000
//! ```
//!
//! Arguments: the algorithm (gcra, fixed_window, token_bucket,
//! sliding_window), how many keys (a power of two), how many checks.
use ratecell::lease::{GrantReply, LeaseConfig, Leases, Step};
use ratecell::{Algorithm, Config};

const DAY: u64 = 86_400_000_000_000;

#[inline(never)]
fn measured(l: &Leases, keys: &[u64], n: usize, now: u64) -> u64 {
    let mut a = 0;
    for i in 0..n {
        if let Step::Decided(d) = l.check(keys[i & (keys.len() - 1)], 1, now) {
            a += u64::from(d.allowed);
        }
    }
    a
}

fn main() {
    let mut args = std::env::args().skip(1);
    let alg = match args.next().as_deref() {
        Some("gcra") => Algorithm::Gcra,
        Some("token_bucket") => Algorithm::TokenBucket,
        Some("sliding_window") => Algorithm::SlidingWindow,
        _ => Algorithm::FixedWindow,
    };
    let nkeys: usize = args.next().map_or(1, |s| s.parse().unwrap());
    let n: usize = args.next().map_or(200_000, |s| s.parse().unwrap());
    let now = 1_800_000_000_000_000_000u64 / DAY * DAY + DAY / 2;
    let leases = Leases::new(LeaseConfig::new(
        Config::new(alg, 1_000_000_000, DAY).capacity(4096),
    ))
    .unwrap();
    let expires = match alg {
        Algorithm::FixedWindow | Algorithm::SlidingWindow => (now / DAY + 1) * DAY,
        Algorithm::TokenBucket => now + DAY,
        _ => now + DAY / 10,
    };
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let keys: Vec<u64> = (0..nkeys)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })
        .collect();
    for &k in &keys {
        let Step::Fetch(req) = leases.check(k, 1, now) else {
            panic!()
        };
        let reply = GrantReply {
            units: 1 << 31,
            expires_at_ns: expires,
            retry_after_ns: 0,
            limit: 1_000_000_000,
            remaining: 0,
        };
        assert!(
            leases
                .complete(&req, Some(reply), now)
                .decision
                .unwrap()
                .allowed
        );
    }
    let a = measured(&leases, &keys, n, now + 1);
    assert_eq!(a, n as u64);
    println!("{a}");
}
