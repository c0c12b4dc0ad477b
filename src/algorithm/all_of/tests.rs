use super::*;
use crate::config::Config;

const T0: u64 = 1_700_000_000_000_000_000;
const S: u64 = 1_000_000_000;

fn rule(c: Config) -> Rule {
    Rule::new(&c.params().unwrap())
}

fn rules() -> Vec<Rule> {
    vec![
        rule(Config::new(Algorithm::Gcra, 10, S)),
        rule(Config::new(Algorithm::FixedWindow, 3, 60 * S)),
    ]
}

#[test]
fn the_tightest_limit_decides_and_a_denial_spends_nothing() {
    for max_bits in [128, 0] {
        let all = AllOf::new(&rules(), max_bits);
        assert_eq!(all.is_word(), max_bits == 128);
        let mut word = 0u128;
        let mut block = vec![0u64; BlockAlgorithm::words(&all)];
        let mut check = |n: u64| {
            let mut each = [Decision::default(); 2];
            let d = if all.is_word() {
                let (d, next) = WordAlgorithm::decide_each(&all, word, T0, n, &mut each);
                if let Some(next) = next {
                    word = next;
                }
                d
            } else {
                BlockAlgorithm::decide_each(&all, block.as_mut_slice(), T0, n, &mut each)
            };
            (d, each)
        };
        for left in [2, 1, 0] {
            let (d, each) = check(1);
            assert!(d.allowed);
            assert_eq!((d.remaining, d.limit), (left, 3), "the window is tighter");
            assert_eq!(each[0].remaining, 7 + left);
        }
        let (d, each) = check(1);
        assert!(!d.allowed);
        assert!(each[0].allowed && !each[1].allowed);
        assert_eq!(each[0].remaining, 7, "GCRA's state is unchanged");
        assert_eq!(d.retry_after_ns, each[1].retry_after_ns);
        assert_eq!(d.reset_after_ns, 60 * S - T0 % (60 * S));
    }
}
/// The block layout's offsets up to the most words `multi::rules`
/// accepts (a longer sliding log is refused there: its offsets would
/// pass `u32`).
#[test]
fn offsets_reach_the_largest_block() {
    let limit = (u64::from(u32::MAX) - 5) / 2;
    let log = rule(Config::new(Algorithm::SlidingLog, limit, S));
    let bucket = rule(Config::new(Algorithm::TokenBucket, 10, S));
    let all = AllOf::new(&[log, bucket], 96);
    assert!(!all.is_word());
    assert_eq!(log.words() as u32, u32::MAX - 2);
    let at: Vec<u32> = all.parts().iter().map(|p| p.at).collect();
    assert_eq!(at, [0, u32::MAX - 2]);
    assert_eq!(BlockAlgorithm::words(&all), u32::MAX as usize);
}
