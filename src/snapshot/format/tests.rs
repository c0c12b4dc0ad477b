//! Hostile snapshots: well-formed, with both checksums right, but
//! holding what no limiter writes. Each must be refused by name.

use super::*;
use crate::algorithm::mask;
use crate::builder::States;
use crate::check::request::Request;
use crate::clock::Clock;
use crate::config::Algorithm;
use crate::keyed::KeyedLimiter;
use crate::limiter::Limiter;

const T0: u64 = 1_700_000_000_000_000_000;
const SECOND: u64 = 1_000_000_000;

fn clock() -> Clock {
    Clock::manual(T0).0
}

/// `config`'s keyed limiter on the test clock, restored from `snapshot`.
fn restore_keyed(config: Config, snapshot: &[u8]) -> Result<KeyedLimiter, SnapshotError> {
    KeyedLimiter::builder()
        .limit(config)
        .clock(clock())
        .states(States::bytes(snapshot))
        .build()
}

/// `config`'s direct limiter on the test clock, restored from `snapshot`.
fn restore_direct(config: Config, snapshot: &[u8]) -> Result<Limiter, SnapshotError> {
    Limiter::builder()
        .limit(config)
        .clock(clock())
        .states(States::bytes(snapshot))
        .build()
}

/// Recomputes both checksums after an edit.
fn reseal(bytes: &mut [u8]) {
    let mut crc = Crc32c::new();
    crc.update(&bytes[..HEADER_LEN]);
    bytes[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&crc.value().to_le_bytes());
    let end = bytes.len() - 4;
    let mut crc = Crc32c::new();
    crc.update(&bytes[..end]);
    bytes[end..].copy_from_slice(&crc.value().to_le_bytes());
}

fn put(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

fn keyed(algorithm: Algorithm, limit: u64, keys: u64) -> (Config, Vec<u8>) {
    let cfg = Config::new(algorithm, limit, SECOND).capacity(64);
    let l = KeyedLimiter::made(&[cfg], clock(), crate::table::KeyHasher::random()).unwrap();
    for key in 0..keys {
        assert!(l.check(key, Request::new(1).at(T0)).allowed);
    }
    let mut bytes = Vec::new();
    l.snapshot_at(&mut bytes, T0).unwrap();
    (cfg, bytes)
}

fn refused(cfg: Config, bytes: &[u8], why: &str) {
    match restore_keyed(cfg, bytes) {
        Err(SnapshotError::Damaged(reason)) => {
            assert!(reason.contains(why), "{reason:?} does not say {why:?}")
        }
        other => panic!("expected Damaged({why:?}), got {other:?}"),
    }
}

/// The first record starts after the header and its checksum.
const FIRST: usize = HEADER_LEN + 4;
/// A word record: place, fingerprint, two words of state.
const WORD_RECORD: usize = 32;

#[test]
fn a_resealed_copy_still_restores() {
    let (cfg, mut bytes) = keyed(Algorithm::FixedWindow, 5, 3);
    reseal(&mut bytes);
    restore_keyed(cfg, &bytes[..]).unwrap();
}

#[test]
fn places_out_of_order_or_beyond_the_table_are_refused() {
    let (cfg, bytes) = keyed(Algorithm::Gcra, 5, 3);
    let places = get(&bytes, 96);
    let mut beyond = bytes.clone();
    put(&mut beyond, FIRST, places);
    reseal(&mut beyond);
    refused(cfg, &beyond, "beyond the table");
    let mut repeated = bytes.clone();
    let first = get(&bytes, FIRST);
    put(&mut repeated, FIRST + WORD_RECORD, first);
    reseal(&mut repeated);
    refused(cfg, &repeated, "out of order");
}

#[test]
fn fingerprints_no_key_has_are_refused() {
    let (cfg, bytes) = keyed(Algorithm::TokenBucket, 5, 2);
    for fingerprint in [0, 1, u64::MAX] {
        let mut b = bytes.clone();
        put(&mut b, FIRST + 8, fingerprint);
        reseal(&mut b);
        refused(cfg, &b, "fingerprint");
    }
}

#[test]
fn states_no_limiter_stores_are_refused() {
    // A fixed window's window beyond the last any time has.
    let (cfg, bytes) = keyed(Algorithm::FixedWindow, 5, 1);
    let mut b = bytes.clone();
    let window_bits = crate::algorithm::bits_for(u64::MAX / SECOND);
    let packed = u128::from(get(&b, FIRST + 16)) | (u128::from(get(&b, FIRST + 24)) << 64);
    let beyond = (packed & !mask(window_bits)) | mask(window_bits);
    put(&mut b, FIRST + 16, beyond as u64);
    put(&mut b, FIRST + 24, (beyond >> 64) as u64);
    reseal(&mut b);
    refused(cfg, &b, "word 0 (window) 34359738367 is above 18446744073");
    // A count above the limit (6 of 5) is one a lowered limit leaves
    // (SPEC §4, "What a loader accepts"): restored, and it denies.
    let mut b = bytes.clone();
    let count_6 = (packed & mask(window_bits)) | (6u128 << window_bits);
    put(&mut b, FIRST + 16, count_6 as u64);
    put(&mut b, FIRST + 24, (count_6 >> 64) as u64);
    reseal(&mut b);
    let l = restore_keyed(cfg, &b[..]).unwrap();
    let key = (0..64).find(|&k| !l.check(k, Request::new(0).at(T0)).allowed);
    assert!(key.is_some(), "the key holding 6 of 5 is denied");
    // Bits above the state's width.
    let mut b = bytes.clone();
    put(&mut b, FIRST + 24, 1 << 40);
    reseal(&mut b);
    refused(cfg, &b, "cannot have stored");
}

#[test]
fn sliding_log_rings_out_of_range_are_refused() {
    // Record: place, fingerprint, head, len, base, then (ts, total).
    let (cfg, bytes) = keyed(Algorithm::SlidingLog, 3, 1);
    let state = FIRST + 16;
    assert_eq!(get(&bytes, state + 8), 1, "one entry");
    // head beyond the ring: the listing stops at the header, so the
    // entry's words are read as the END marker's place: refused either way.
    let mut b = bytes.clone();
    put(&mut b, state, 3);
    reseal(&mut b);
    assert!(restore_keyed(cfg, &b[..]).is_err());
    // An entry adding more than the limit.
    let mut b = bytes.clone();
    put(&mut b, state + 32, get(&bytes, state + 16) + 4);
    reseal(&mut b);
    refused(cfg, &b, "cannot have stored");
    // An entry adding nothing.
    let mut b = bytes.clone();
    put(&mut b, state + 32, get(&bytes, state + 16));
    reseal(&mut b);
    refused(cfg, &b, "cannot have stored");
}

#[test]
fn a_footer_count_that_differs_is_refused() {
    let (cfg, mut bytes) = keyed(Algorithm::SlidingWindow, 5, 3);
    let at = bytes.len() - 12;
    put(&mut bytes, at, 2);
    reseal(&mut bytes);
    refused(cfg, &bytes, "counts 2 records");
}

/// A keyed snapshot of two limits (version 2: one 32-byte entry in the
/// header's limits table).
fn two_limits() -> (Vec<Config>, Vec<u8>) {
    let configs = [
        Config::new(Algorithm::Gcra, 5, SECOND).capacity(64),
        Config::new(Algorithm::SlidingLog, 3, SECOND).capacity(64),
    ];
    let l = KeyedLimiter::made(&configs, clock(), crate::table::KeyHasher::random()).unwrap();
    l.check(1, Request::new(1).at(T0));
    let mut bytes = Vec::new();
    l.snapshot_at(&mut bytes, T0).unwrap();
    (configs.to_vec(), bytes)
}

/// Recomputes both checksums of a version 2 snapshot whose header
/// holds `entries` table entries.
fn reseal_v2(bytes: &mut [u8], entries: usize) {
    let at = HEADER_LEN + LIMIT_LEN * entries;
    let mut crc = Crc32c::new();
    crc.update(&bytes[..at]);
    bytes[at..at + 4].copy_from_slice(&crc.value().to_le_bytes());
    let end = bytes.len() - 4;
    let mut crc = Crc32c::new();
    crc.update(&bytes[..end]);
    bytes[end..].copy_from_slice(&crc.value().to_le_bytes());
}

#[test]
fn a_count_of_limits_out_of_range_is_refused_before_the_table_is_read() {
    let (configs, bytes) = two_limits();
    assert_eq!(get(&bytes, 8) as u32, 2, "version 2");
    assert_eq!(u32::from_le_bytes(bytes[28..32].try_into().unwrap()), 2);
    let mut b = bytes.clone();
    reseal_v2(&mut b, 1);
    KeyedLimiter::builder()
        .limits(&configs)
        .clock(clock())
        .states(States::bytes(&b[..]))
        .build()
        .unwrap();
    for count in [0u32, 1, 9, u32::MAX] {
        let mut b = bytes.clone();
        b[28..32].copy_from_slice(&count.to_le_bytes());
        reseal_v2(&mut b, 1);
        match KeyedLimiter::builder()
            .limits(&configs)
            .clock(clock())
            .states(States::bytes(&b[..]))
            .build()
        {
            Err(SnapshotError::Damaged(r)) => assert!(r.contains("limits"), "{r}"),
            other => panic!("count {count}: {other:?}"),
        }
    }
    // A version 1 header with the count field set: refused as before.
    let (cfg, mut v1) = keyed(Algorithm::Gcra, 5, 1);
    v1[28] = 2;
    reseal(&mut v1);
    refused(cfg, &v1, "reserved");
}

#[test]
fn a_limits_table_entry_no_limiter_writes_is_refused() {
    let (configs, bytes) = two_limits();
    // The entry's algorithm (its first u32) out of range.
    let mut b = bytes.clone();
    b[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&99u32.to_le_bytes());
    reseal_v2(&mut b, 1);
    assert!(matches!(
        saved_tiers(&b[..]),
        Err(SnapshotError::Damaged(_))
    ));
    assert!(matches!(
        KeyedLimiter::builder()
            .limits(&configs)
            .clock(clock())
            .states(States::bytes(&b[..]))
            .build(),
        Err(SnapshotError::ConfigMismatch {
            limit: 1,
            field: Field::Algorithm,
            saved: 99,
            ..
        })
    ));
    // Its limit changed: the saved configuration differs, named.
    let mut b = bytes.clone();
    put(&mut b, HEADER_LEN + 8, 4);
    reseal_v2(&mut b, 1);
    assert!(matches!(
        KeyedLimiter::builder()
            .limits(&configs)
            .clock(clock())
            .states(States::bytes(&b[..]))
            .build(),
        Err(SnapshotError::ConfigMismatch {
            limit: 1,
            field: Field::Limit,
            saved: 4,
            wanted: 3,
        })
    ));
}

#[test]
fn a_direct_log_claiming_more_entries_than_it_holds_is_truncated() {
    let cfg = Config::new(Algorithm::SlidingLog, 1000, SECOND);
    let l = Limiter::made(&[cfg], clock()).unwrap();
    l.check(Request::new(1).at(T0));
    let mut bytes = Vec::new();
    l.snapshot_at(&mut bytes, T0).unwrap();
    put(&mut bytes, FIRST + 8, 1000);
    reseal(&mut bytes);
    assert!(matches!(
        restore_direct(cfg, &bytes[..]),
        Err(SnapshotError::Truncated | SnapshotError::Damaged(_))
    ));
}
