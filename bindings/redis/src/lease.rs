//! `RATECELL.LEASE` (SPEC.md §8): which algorithms lease, and the error
//! for those that do not. The grant rule itself is the library's
//! (`ratecell::lease::grant`, the one implementation, which the protocol's
//! model checks); the command applies it to the key's state.

use ratecell::Algorithm;

/// Whether `algorithm` can be leased, or the error that says why not.
pub fn leasable(algorithm: Algorithm) -> Result<(), String> {
    match algorithm {
        Algorithm::Gcra
        | Algorithm::TokenBucket
        | Algorithm::FixedWindow
        | Algorithm::SlidingWindow => Ok(()),
        Algorithm::LeakyBucket => Err(
            "ERR leaky_bucket cannot be leased: its admissions carry a queue place only the server can assign (SPEC.md §8)".into(),
        ),
        other => Err(format!(
            "ERR {other} cannot be leased: its state places each unit in time, which spending a grant later would move (SPEC.md §8)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_four_algorithms_lease() {
        for alg in Algorithm::ALL {
            let ok = matches!(
                alg,
                Algorithm::Gcra
                    | Algorithm::TokenBucket
                    | Algorithm::FixedWindow
                    | Algorithm::SlidingWindow
            );
            let r = leasable(alg);
            assert_eq!(r.is_ok(), ok, "{alg}");
            if let Err(e) = r {
                assert!(e.starts_with("ERR ") && e.contains(alg.name()), "{e}");
            }
        }
    }
}
