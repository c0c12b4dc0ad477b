//! The worked examples of SPEC.md and of the seed texts (/work/shared/seeds),
//! one named test each, on the public `Limiter` API with explicit times.
//!
//! States are always reached by real requests at real times, never set
//! directly. Times are UTC on 2020-04-21 (the day of seed 004's epoch
//! example), so minutes and hours fall on window edges as in the texts.
//! Expected numbers are worked out by hand from SPEC.md §4 in the comments.

use ratecell::{Algorithm, Clock, Config, Decision, Limiter, Request};

const SECOND: u64 = 1_000_000_000;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;
const MS: u64 = 1_000_000;
/// 2020-04-21 00:00:00 UTC in UNIX ns.
const DAY: u64 = 1_587_427_200 * SECOND;

/// `hh:mm:ss` on that day.
fn at(h: u64, m: u64, s: u64) -> u64 {
    DAY + h * HOUR + m * MINUTE + s * SECOND
}

fn limiter(config: Config) -> Limiter {
    let (clock, _hand) = Clock::manual(DAY);
    Limiter::builder()
        .limit(config)
        .clock(clock)
        .build()
        .expect("example configs are valid")
}

fn admitted(limit: u64, remaining: u64, reset_after_ns: u64) -> Decision {
    Decision {
        allowed: true,
        limit,
        remaining,
        retry_after_ns: 0,
        reset_after_ns,
        wait_ns: 0,
    }
}

fn denied(limit: u64, remaining: u64, retry_after_ns: u64, reset_after_ns: u64) -> Decision {
    Decision {
        allowed: false,
        limit,
        remaining,
        retry_after_ns,
        reset_after_ns,
        wait_ns: 0,
    }
}

// ---------------------------------------------------------------------------
// GCRA (seed 004, "Rate Limiting Techniques")

/// 100 requests/second with "a burst of 5": redis-cell's `max_burst` 5 is
/// `burst = 6` here (SPEC §2): T = 10 ms and the tolerance B·T = 60 ms,
/// i.e. the seed's `allowed_at = TAT − 50 ms` on the old TAT.
#[test]
fn gcra_seed_burst_of_5_is_burst_6_at_100_per_second() {
    let lim = limiter(Config::new(Algorithm::Gcra, 100, SECOND).burst(6));
    let t0 = at(10, 0, 0) + 500 * MS; // the seed's ARRIVAL1, 10:00:00.500
    // Five more than the usual one, all at once.
    for i in 1..=6 {
        assert_eq!(
            lim.check(Request::new(1).at(t0)),
            admitted(6, 6 - i, i * 10 * MS),
            "#{i}"
        );
    }
    // tat = t0 + 60 ms: the seventh waits one emission interval.
    assert_eq!(
        lim.check(Request::new(1).at(t0)),
        denied(6, 0, 10 * MS, 60 * MS)
    );
    // Then one per interval.
    assert_eq!(
        lim.check(Request::new(1).at(t0 + 10 * MS)),
        admitted(6, 0, 60 * MS)
    );
    assert_eq!(
        lim.check(Request::new(1).at(t0 + 10 * MS)),
        denied(6, 0, 10 * MS, 60 * MS)
    );
    // Idle intervals (the seed's .520-.540) earn the balance back: at +40 ms
    // tat − t = 30 ms, so three fit (tat − t back up to 60 ms).
    for i in 1..=3 {
        assert!(
            lim.check(Request::new(1).at(t0 + 40 * MS)).allowed,
            "#{i} at +40 ms"
        );
    }
    assert_eq!(
        lim.check(Request::new(1).at(t0 + 40 * MS)),
        denied(6, 0, 10 * MS, 60 * MS)
    );
}

/// "Without burst", requests must be spaced by the emission interval: a
/// second request 5 ms after the first waits the other 5 ms.
#[test]
fn gcra_seed_without_burst_spaces_requests_by_the_interval() {
    let lim = limiter(Config::new(Algorithm::Gcra, 100, SECOND).burst(1));
    let t0 = at(10, 0, 0) + 500 * MS;
    assert_eq!(lim.check(Request::new(1).at(t0)), admitted(1, 0, 10 * MS));
    assert_eq!(
        lim.check(Request::new(1).at(t0 + 5 * MS)),
        denied(1, 0, 5 * MS, 5 * MS)
    );
    assert_eq!(
        lim.check(Request::new(1).at(t0 + 10 * MS)),
        admitted(1, 0, 10 * MS)
    );
}

/// SPEC §2: T = ceil(P / L), so 3 per µs spaces requests 334 ns apart, never
/// 333 (which would admit a fourth within the microsecond).
#[test]
fn gcra_emission_interval_rounds_up() {
    let lim = limiter(Config::new(Algorithm::Gcra, 3, 1_000).burst(1));
    let t0 = at(0, 0, 0);
    assert!(lim.check(Request::new(1).at(t0)).allowed);
    assert_eq!(lim.check(Request::new(1).at(t0 + 333)), denied(1, 0, 1, 1));
    assert!(lim.check(Request::new(1).at(t0 + 334)).allowed);
    assert!(lim.check(Request::new(1).at(t0 + 668)).allowed);
    assert!(!lim.check(Request::new(1).at(t0 + 1_000)).allowed);
}

// ---------------------------------------------------------------------------
// Leaky bucket as a queue (seeds 000, 003)

/// A queue of 5 at 10/s filled at one instant: each request's wait is its
/// place in the queue, T = 100 ms apart; the sixth finds the queue full.
#[test]
fn leaky_bucket_waits_are_queue_places() {
    let lim = limiter(Config::new(Algorithm::LeakyBucket, 10, SECOND).burst(5));
    let t0 = at(12, 0, 0);
    for i in 0..5 {
        let d = lim.check(Request::new(1).at(t0));
        assert_eq!(
            d,
            Decision {
                wait_ns: i * 100 * MS,
                ..admitted(5, 4 - i, (i + 1) * 100 * MS)
            },
            "#{i}"
        );
    }
    assert_eq!(
        lim.check(Request::new(1).at(t0)),
        denied(5, 0, 100 * MS, 500 * MS)
    );
    // One place frees every 100 ms; the newcomer queues behind four.
    let d = lim.check(Request::new(1).at(t0 + 100 * MS));
    assert!(d.allowed);
    assert_eq!(d.wait_ns, 400 * MS);
}

/// Seed 000's experiment: however bursty the arrivals, what leaves the
/// bucket (arrival + wait) leaves at the constant rate of one per T.
#[test]
fn leaky_bucket_releases_at_a_constant_rate() {
    let lim = limiter(Config::new(Algorithm::LeakyBucket, 10, SECOND).burst(20));
    let t0 = at(12, 0, 0);
    // 20 arrivals within 19 ms, 1 ms apart.
    let departures: Vec<u64> = (0..20)
        .map(|i| {
            let t = t0 + i * MS;
            let d = lim.check(Request::new(1).at(t));
            assert!(d.allowed, "#{i}");
            t + d.wait_ns
        })
        .collect();
    for pair in departures.windows(2) {
        assert_eq!(pair[1] - pair[0], 100 * MS);
    }
}

/// SPEC: burst 1 is strict spacing of T between requests.
#[test]
fn leaky_bucket_of_size_1_spaces_strictly() {
    let lim = limiter(Config::new(Algorithm::LeakyBucket, 10, SECOND).burst(1));
    let t0 = at(12, 0, 0);
    assert_eq!(lim.check(Request::new(1).at(t0)), admitted(1, 0, 100 * MS));
    assert_eq!(
        lim.check(Request::new(1).at(t0 + 30 * MS)),
        denied(1, 0, 70 * MS, 70 * MS)
    );
    assert_eq!(
        lim.check(Request::new(1).at(t0 + 100 * MS)),
        admitted(1, 0, 100 * MS)
    );
}

// ---------------------------------------------------------------------------
// Token bucket (seed 003, "Algorithms for rate limiting")

/// Capacity 3, refilled with 3 tokens every minute. The full bucket's
/// refill clock starts at the first take (00:00:10).
#[test]
fn token_bucket_capacity_3_refilled_3_per_minute() {
    let lim = limiter(Config::new(Algorithm::TokenBucket, 3, MINUTE).burst(3));
    // last = 00:00:10; every reset is at the refill, 00:01:10.
    assert_eq!(
        lim.check(Request::new(1).at(at(0, 0, 10))),
        admitted(3, 2, 60 * SECOND)
    );
    assert_eq!(
        lim.check(Request::new(1).at(at(0, 0, 20))),
        admitted(3, 1, 50 * SECOND)
    );
    assert_eq!(
        lim.check(Request::new(1).at(at(0, 0, 30))),
        admitted(3, 0, 40 * SECOND)
    );
    // "One more (fourth) request arrives in the same minute. Reject."
    assert_eq!(
        lim.check(Request::new(1).at(at(0, 0, 40))),
        denied(3, 0, 30 * SECOND, 30 * SECOND)
    );
    // "Refill the bucket after one minute."
    assert_eq!(lim.check(Request::new(0).at(at(0, 1, 9))).remaining, 0);
    assert_eq!(
        lim.check(Request::new(1).at(at(0, 1, 10))),
        admitted(3, 2, 60 * SECOND)
    );
    assert!(lim.check(Request::new(1).at(at(0, 1, 10))).allowed);
    assert!(lim.check(Request::new(1).at(at(0, 1, 10))).allowed);
    assert_eq!(
        lim.check(Request::new(1).at(at(0, 1, 10))),
        denied(3, 0, 60 * SECOND, 60 * SECOND)
    );
}

// ---------------------------------------------------------------------------
// Fixed window (seeds 000, 002, 003, 004)

/// Seed 000: 2 per minute; 00:00:24 and 00:00:36 fill window 1, 00:00:49 is
/// rejected, 00:01:12 belongs to window 2.
#[test]
fn fixed_window_2_per_minute_at_00_00_24_36_49_and_00_01_12() {
    let lim = limiter(Config::new(Algorithm::FixedWindow, 2, MINUTE));
    assert_eq!(
        lim.check(Request::new(1).at(at(0, 0, 24))),
        admitted(2, 1, 36 * SECOND)
    );
    assert_eq!(
        lim.check(Request::new(1).at(at(0, 0, 36))),
        admitted(2, 0, 24 * SECOND)
    );
    assert_eq!(
        lim.check(Request::new(1).at(at(0, 0, 49))),
        denied(2, 0, 11 * SECOND, 11 * SECOND)
    );
    assert_eq!(
        lim.check(Request::new(1).at(at(0, 1, 12))),
        admitted(2, 1, 48 * SECOND)
    );
}

/// Seed 000: 2 per minute, requests at 00:00:58, :59, 00:01:01, :02 are all
/// admitted: 4 within 4 seconds, twice the limit across the edge. The
/// sliding log and the sliding window refuse the third.
#[test]
fn fixed_window_boundary_burst_is_twice_the_limit() {
    let times = [at(0, 0, 58), at(0, 0, 59), at(0, 1, 1), at(0, 1, 2)];
    let fixed = limiter(Config::new(Algorithm::FixedWindow, 2, MINUTE));
    assert!(
        times
            .iter()
            .all(|&t| fixed.check(Request::new(1).at(t)).allowed)
    );

    let log = limiter(Config::new(Algorithm::SlidingLog, 2, MINUTE));
    let got: Vec<Decision> = times
        .iter()
        .map(|&t| log.check(Request::new(1).at(t)))
        .collect();
    assert!(got[0].allowed && got[1].allowed);
    // 00:00:58 leaves the log at 00:01:58.
    assert_eq!(got[2], denied(2, 0, 57 * SECOND, 58 * SECOND));
    assert!(!got[3].allowed);

    // At 00:01:01: 2·59/60 + 0 + 1 > 2.
    let sliding = limiter(Config::new(Algorithm::SlidingWindow, 2, MINUTE));
    let got: Vec<bool> = times
        .iter()
        .map(|&t| sliding.check(Request::new(1).at(t)).allowed)
        .collect();
    assert_eq!(got, [true, true, false, false]);
}

/// Seed 004: 100 per minute, 100 requests at 10:00:59 and 100 more at
/// 10:01:01: 200 in two seconds.
#[test]
fn fixed_window_100_per_minute_admits_200_in_two_seconds() {
    let lim = limiter(Config::new(Algorithm::FixedWindow, 100, MINUTE));
    for t in [at(10, 0, 59), at(10, 1, 1)] {
        assert!((0..100).all(|_| lim.check(Request::new(1).at(t)).allowed));
        assert!(!lim.check(Request::new(1).at(t)).allowed);
    }
}

// ---------------------------------------------------------------------------
// Sliding window counter (SPEC §4 and seeds 000, 003)

/// SPEC / seed 003: 100 per minute, 88 in the previous window, 12 in the
/// current one, 15 s in: 88·45/60 + 12 + 1 = 79 ≤ 100, admitted.
#[test]
fn sliding_window_100_per_minute_prev_88_cur_12_at_15s_is_admitted() {
    let lim = limiter(Config::new(Algorithm::SlidingWindow, 100, MINUTE));
    let w = at(10, 2, 0); // the current window starts on the minute
    for i in 0..88 {
        assert!(
            lim.check(Request::new(1).at(w - MINUTE + i * 500 * MS))
                .allowed,
            "prev #{i}"
        );
    }
    // At the window's start the previous one weighs fully: 88 + 12 = 100.
    for i in 0..12 {
        assert!(lim.check(Request::new(1).at(w)).allowed, "cur #{i}");
    }
    // A 13th at 02:00 would be 101. It fits once 88·(P − e) ≤ 87·P, at
    // e = P − floor(87·P / 88) = 681 818 182 ns.
    let d = lim.check(Request::new(1).at(w));
    assert_eq!(d, denied(100, 0, 681_818_182, 2 * MINUTE));
    // 02:15: admitted; remaining = 100 − 66 − 13 = 21.
    let d = lim.check(Request::new(1).at(w + 15 * SECOND));
    assert_eq!(d, admitted(100, 21, 2 * MINUTE - 15 * SECOND));
}

/// SPEC / seed 000: 10 per minute, 9 in the previous window, 5 in the
/// current one, 25 % in: 9·0.75 + 5 + 1 = 12.75 > 10, denied.
///
/// Moving forward, the fifth current request could not have been admitted
/// before 26.7 s (9·(P − e)/P + 5 ≤ 10), so the five arrive at 00:01:50 and
/// the request at 00:01:15 comes late (time going back within the window,
/// which keeps the window and its counts).
#[test]
fn sliding_window_10_per_minute_prev_9_cur_5_at_25_percent_is_denied() {
    let lim = limiter(Config::new(Algorithm::SlidingWindow, 10, MINUTE));
    for i in 0..9 {
        assert!(
            lim.check(Request::new(1).at(at(0, 0, 5 * i))).allowed,
            "prev #{i}"
        );
    }
    for i in 0..5 {
        assert!(
            lim.check(Request::new(1).at(at(0, 1, 50))).allowed,
            "cur #{i}"
        );
    }
    // It fits once 9·(P − e) ≤ 4·P: e = P − floor(4·P / 9) = 33.333333334 s,
    // 18.333333334 s after 00:01:15. Remaining: floor(10 − 6.75 − 5) < 0 → 0.
    let d = lim.check(Request::new(1).at(at(0, 1, 15)));
    assert_eq!(d, denied(10, 0, 18_333_333_334, 105 * SECOND));
    assert!(
        !lim.check(Request::new(1).at(at(0, 1, 15) + 18_333_333_333))
            .allowed
    );
    assert!(
        lim.check(Request::new(1).at(at(0, 1, 15) + 18_333_333_334))
            .allowed
    );
}

/// Seed 000's reader comment corrects 14.75 to 11.75 = 9·0.75 + 5: with 9
/// in the previous window and nothing yet in this one, at 00:01:15 a cost-5
/// request weighs 11.75 and a cost-4 one 10.75 (both over 10); cost 3 fits.
#[test]
fn sliding_window_reader_correction_11_75_is_over_the_limit() {
    let lim = limiter(Config::new(Algorithm::SlidingWindow, 10, MINUTE));
    for i in 0..9 {
        assert!(
            lim.check(Request::new(1).at(at(0, 0, 5 * i))).allowed,
            "prev #{i}"
        );
    }
    let t = at(0, 1, 15);
    assert_eq!(lim.check(Request::new(0).at(t)).remaining, 3);
    assert!(!lim.check(Request::new(5).at(t)).allowed);
    assert!(!lim.check(Request::new(4).at(t)).allowed);
    assert_eq!(
        lim.check(Request::new(3).at(t)),
        admitted(10, 0, 2 * MINUTE - 15 * SECOND)
    );
}

// ---------------------------------------------------------------------------
// Bucketed sliding window (seeds 002, 004)

/// Seed 002: 500 per hour, one counter per minute (N = 60). The hour slides
/// by whole minutes: a minute's count leaves exactly an hour after it.
#[test]
fn bucketed_window_500_per_hour_with_60_minute_counters() {
    let cfg = Config::new(Algorithm::BucketedWindow, 500, HOUR).sub_windows(60);
    let lim = limiter(cfg);
    let h = at(10, 0, 0);
    for i in 0..300 {
        assert!(
            lim.check(Request::new(1).at(h + 10 * SECOND)).allowed,
            "10:00 #{i}"
        );
    }
    for i in 0..200 {
        assert!(
            lim.check(Request::new(1).at(h + 30 * MINUTE)).allowed,
            "10:30 #{i}"
        );
    }
    // Full: the 10:00 minute leaves at 11:00, the 10:30 one at 11:30.
    assert_eq!(
        lim.check(Request::new(1).at(at(10, 59, 59))),
        denied(500, 0, SECOND, 30 * MINUTE + SECOND)
    );
    // 301 units need the 10:30 minute gone as well.
    assert_eq!(
        lim.check(Request::new(301).at(at(10, 59, 59))),
        denied(500, 0, 30 * MINUTE + SECOND, 30 * MINUTE + SECOND)
    );
    // 11:00: only the 200 from 10:30 still count, where a fresh fixed hour
    // would allow 500.
    assert_eq!(lim.check(Request::new(0).at(at(11, 0, 0))).remaining, 300);
    assert_eq!(
        lim.check(Request::new(300).at(at(11, 0, 0))),
        admitted(500, 0, HOUR)
    );
    assert_eq!(
        lim.check(Request::new(1).at(at(11, 0, 0))),
        denied(500, 0, 30 * MINUTE, HOUR)
    );
    assert!(lim.check(Request::new(200).at(at(11, 30, 0))).allowed);
}

// ---------------------------------------------------------------------------
// Sliding log (seeds 000, 003)

/// Seed 003: 2 per minute; 01:00 and 01:20 are logged, 01:45 is rejected,
/// 02:25 is admitted once both have left the window (01:25, 02:25].
#[test]
fn sliding_log_2_per_minute_at_01_00_01_20_01_45_and_02_25() {
    let lim = limiter(Config::new(Algorithm::SlidingLog, 2, MINUTE));
    assert_eq!(
        lim.check(Request::new(1).at(at(0, 1, 0))),
        admitted(2, 1, MINUTE)
    );
    assert_eq!(
        lim.check(Request::new(1).at(at(0, 1, 20))),
        admitted(2, 0, MINUTE)
    );
    // 01:00 leaves at 02:00; 01:20 at 02:20.
    assert_eq!(
        lim.check(Request::new(1).at(at(0, 1, 45))),
        denied(2, 0, 15 * SECOND, 35 * SECOND)
    );
    assert_eq!(
        lim.check(Request::new(1).at(at(0, 2, 25))),
        admitted(2, 1, MINUTE)
    );
}

/// Denied requests are never logged (seed 000's version logs them, which
/// locks out a client that keeps retrying).
#[test]
fn sliding_log_does_not_count_denied_requests() {
    let lim = limiter(Config::new(Algorithm::SlidingLog, 2, MINUTE));
    assert!(lim.check(Request::new(1).at(at(0, 1, 0))).allowed);
    assert!(lim.check(Request::new(1).at(at(0, 1, 1))).allowed);
    for s in 2..60 {
        assert!(!lim.check(Request::new(1).at(at(0, 1, s))).allowed);
    }
    assert!(lim.check(Request::new(1).at(at(0, 2, 0))).allowed);
}

/// The crate docs' example: a manual clock moved by `retry_after`.
#[test]
fn retry_after_on_a_manual_clock() {
    let (clock, hand) = Clock::manual(at(9, 0, 0));
    let lim = Limiter::builder()
        .limit(Config::new(Algorithm::SlidingWindow, 5, SECOND))
        .clock(clock)
        .build()
        .expect("valid");
    assert_eq!((0..8).filter(|_| lim.check(1).allowed).count(), 5);
    let d = lim.check(1);
    assert!(!d.allowed && d.remaining == 0);
    // In the next window the five weigh 5·(P − e)/P: a sixth fits at e = P/5.
    assert_eq!(d.retry_after_ns, SECOND + 200 * MS);
    hand.advance(d.retry_after_ns);
    assert!(lim.check(1).allowed);
}
