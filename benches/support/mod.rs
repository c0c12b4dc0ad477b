//! What the benchmark cases share: reproducible keys, the physical-limit
//! baselines (a bare table of 16-byte slots and a bare padded CAS), and the
//! harness that times two threads at once.
//!
//! The baselines do the least work any keyed or direct limiter on atomic
//! cells could do: hash a key, touch one slot, one load and one CAS. They
//! keep no fingerprints and decide nothing, so a limiter's cost over them is
//! exactly what its bookkeeping costs.

pub mod cpu_time;

use crossbeam_utils::CachePadded;
use portable_atomic::AtomicU128;
use std::hint::black_box;
use std::sync::Barrier;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};
use std::time::{Duration, Instant};

/// A fixed start of time for the explicit-time cases (UNIX ns, 2023).
pub const T0: u64 = 1_700_000_000_000_000_000;

/// SplitMix64: a bijection of its counter, so `n` consecutive outputs are
/// `n` distinct keys, and the same seed gives the same keys on every run.
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Fisher-Yates: a uniformly random order of `items`.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            items.swap(i, j);
        }
    }
}

/// `n` distinct random `u64` keys, in random order.
pub fn u64_keys(n: usize, seed: u64) -> Vec<u64> {
    let mut rng = SplitMix::new(seed);
    let mut keys: Vec<u64> = (0..n).map(|_| rng.next_u64()).collect();
    rng.shuffle(&mut keys);
    keys
}

/// `n` distinct random 16-byte keys (a UUID, an IPv6 address), in random
/// order. The first 8 bytes alone are distinct.
pub fn keys16(n: usize, seed: u64) -> Vec<[u8; 16]> {
    let mut rng = SplitMix::new(seed);
    let mut keys: Vec<[u8; 16]> = (0..n)
        .map(|_| {
            let mut k = [0u8; 16];
            k[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
            k[8..].copy_from_slice(&rng.next_u64().to_le_bytes());
            k
        })
        .collect();
    rng.shuffle(&mut keys);
    keys
}

/// A cursor that walks a precomputed key array round and round.
pub struct Cycle<'a, T> {
    items: &'a [T],
    next: usize,
}

impl<'a, T> Cycle<'a, T> {
    pub fn new(items: &'a [T]) -> Cycle<'a, T> {
        assert!(!items.is_empty());
        Cycle { items, next: 0 }
    }

    #[inline]
    pub fn next_item(&mut self) -> &'a T {
        let item = &self.items[self.next];
        self.next += 1;
        if self.next == self.items.len() {
            self.next = 0;
        }
        item
    }
}

const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

/// Starts loading the cache line at `ptr` (a hint: it never faults).
#[inline]
fn prefetch<T>(ptr: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing architecturally, for any address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(ptr.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

/// The physical limit of a keyed table: 16-byte slots sized like ratecell's
/// word table (1.45 slots per key of capacity, whole 64-byte buckets of
/// four), one multiplicative hash, one slot, one load and one CAS per check.
pub struct BareTable {
    slots: Slots,
}

impl BareTable {
    pub fn new(capacity: usize) -> BareTable {
        BareTable {
            slots: huge_page_slots(Self::slots(capacity)),
        }
    }

    /// [`BareTable::new`] with its slots in a file at `path` mapped
    /// shared, set up as ratecell sets up a shared region
    /// (`src/shared/region.rs`): sized with `ftruncate`, mapped
    /// `MAP_SHARED`, advised `MADV_HUGEPAGE`, every page faulted in with
    /// `MADV_POPULATE_WRITE`. The file is removed at once (the mapping
    /// keeps its pages). The floor of a shared table: what the memory
    /// alone costs, with nothing of ratecell in it.
    #[allow(dead_code)] // only the bench group `shared` uses it
    pub fn in_file(capacity: usize, path: &str) -> BareTable {
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        let len = Self::slots(capacity);
        let bytes = len * size_of::<AtomicU128>();
        let cpath = std::ffi::CString::new(path).unwrap();
        let fail = |what: &str| -> ! {
            panic!(
                "bare table in {path}: {what}: {}",
                std::io::Error::last_os_error()
            )
        };
        // SAFETY: a valid C string; a new file of our own.
        let fd = unsafe {
            libc::open(
                cpath.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd < 0 {
            fail("open");
        }
        // SAFETY: fd is ours, open read-write; the mapping is fresh.
        let ptr = unsafe {
            if libc::ftruncate(fd, bytes as libc::off_t) != 0 {
                fail("ftruncate");
            }
            let ptr = libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            if ptr == libc::MAP_FAILED {
                fail("mmap");
            }
            libc::madvise(ptr, bytes, libc::MADV_HUGEPAGE);
            if libc::madvise(ptr, bytes, MADV_POPULATE_WRITE) != 0 {
                fail("MADV_POPULATE_WRITE");
            }
            libc::close(fd);
            libc::unlink(cpath.as_ptr());
            ptr
        };
        BareTable {
            slots: Slots {
                ptr: ptr.cast(),
                len,
            },
        }
    }

    /// 1.45 slots per key of capacity, in whole buckets of four.
    fn slots(capacity: usize) -> usize {
        (capacity * 145).div_ceil(100).div_ceil(4) * 4
    }

    #[inline]
    fn slot(&self, h: u64) -> &AtomicU128 {
        // The product's high word: multiply-shift over the top bits of h.
        let i = ((u128::from(h) * self.slots.len() as u128) >> 64) as usize;
        &self.slots[i]
    }

    #[inline]
    fn bump(slot: &AtomicU128) -> bool {
        let old = slot.load(Relaxed);
        slot.compare_exchange(old, old.wrapping_add(1), Relaxed, Relaxed)
            .is_ok()
    }

    /// [`BareTable::check_u64`] with a clock read per check, its time
    /// written into the slot (so the dependency from the read to the CAS
    /// is as in a clocked limiter). With `prefetch_first` the key's slot is
    /// requested from memory before the clock is read, as ratecell's keyed
    /// check does; without it the clock is read first.
    #[inline]
    pub fn check_u64_clocked(
        &self,
        key: u64,
        clock: &ratecell::Clock,
        prefetch_first: bool,
    ) -> bool {
        let slot = self.slot(key.wrapping_mul(MULTIPLIER));
        if prefetch_first {
            prefetch(slot);
        }
        let t = clock.now_ns();
        let old = slot.load(Relaxed);
        let new = (u128::from(t) << 64) | u128::from((old as u64).wrapping_add(1));
        slot.compare_exchange(old, new, Relaxed, Relaxed).is_ok()
    }

    /// The least a keyed GCRA check on this machine can do, with nothing
    /// of ratecell's table in it: SipHash-1-3 of the key under a random
    /// key (`hasher`, std's, as governor's keyed map hashes), the time
    /// (`clock`, or `t` when `clock` is `None`), one 16-byte load of the
    /// key's slot, GCRA's decision on the slot's low word (`state::Rule`,
    /// ratecell's arithmetic on plain words) and one CAS of the new
    /// state. Not exact: any key in the slot is taken as this one (no
    /// fingerprint, no probing; [`BareTable::check_gcra_tagged`] tells
    /// keys apart), and no statistics.
    #[inline]
    pub fn check_gcra(
        &self,
        hasher: &std::hash::RandomState,
        key: u64,
        clock: Option<&ratecell::Clock>,
        t: u64,
        rule: &ratecell::state::Rule,
    ) -> ratecell::Decision {
        use std::hash::BuildHasher;
        let slot = self.slot(hasher.hash_one(key));
        prefetch(slot);
        let t = clock.map_or(t, |c| c.now_ns());
        Self::gcra(slot, slot.load(Relaxed), t, rule)
    }

    /// Places `key` for [`BareTable::check_gcra_tagged`]: its SipHash in
    /// the high half of the first empty slot of its bucket of four, or of
    /// the buckets after it. Only on a table that no other case uses
    /// (only `examples/hotpath.rs` runs this table).
    #[allow(dead_code)]
    pub fn place_tagged(&self, hasher: &std::hash::RandomState, key: u64) {
        let tag = Self::tag(hasher, key);
        let empty = self
            .slots_from(self.bucket(tag))
            .find(|slot| slot.load(Relaxed) == 0)
            .expect("the bare table has room for its capacity");
        empty.store(u128::from(tag) << 64, Relaxed);
    }

    /// [`BareTable::check_gcra`] on a table that tells keys apart: the
    /// key's slot found by comparing the four slots of its bucket with
    /// its hash (kept whole in the high half: no fingerprint to derive,
    /// no shard, no insert path), then GCRA and one CAS; keys placed
    /// beyond their home bucket (`place_tagged`) are looked up out of
    /// line. What telling keys apart costs beside `check_gcra`, not a
    /// floor of ratecell's check: its 16-byte loads and
    /// `state::Rule::decide` are calls here, about as many instructions
    /// as ratecell's whole check over 1k keys.
    #[allow(dead_code)]
    #[inline]
    pub fn check_gcra_tagged(
        &self,
        hasher: &std::hash::RandomState,
        key: u64,
        clock: Option<&ratecell::Clock>,
        t: u64,
        rule: &ratecell::state::Rule,
    ) -> ratecell::Decision {
        let tag = Self::tag(hasher, key);
        let home = self.bucket(tag);
        let bucket = &self.slots[home * 4..][..4];
        prefetch(&raw const bucket[0]);
        let t = clock.map_or(t, |c| c.now_ns());
        for slot in bucket {
            let old = slot.load(Relaxed);
            if (old >> 64) as u64 == tag {
                return Self::gcra(slot, old, t, rule);
            }
        }
        self.check_gcra_beyond(tag, home, t, rule)
    }

    #[allow(dead_code)]
    #[inline(never)]
    fn check_gcra_beyond(
        &self,
        tag: u64,
        home: usize,
        t: u64,
        rule: &ratecell::state::Rule,
    ) -> ratecell::Decision {
        self.slots_from(home)
            .skip(4)
            .find_map(|slot| {
                let old = slot.load(Relaxed);
                ((old >> 64) as u64 == tag).then(|| Self::gcra(slot, old, t, rule))
            })
            .expect("every key checked was placed")
    }

    /// A key's tag: its SipHash, never 0 (an empty slot).
    #[allow(dead_code)]
    #[inline]
    fn tag(hasher: &std::hash::RandomState, key: u64) -> u64 {
        use std::hash::BuildHasher;
        hasher.hash_one(key) | 1
    }

    #[allow(dead_code)]
    #[inline]
    fn bucket(&self, tag: u64) -> usize {
        ((u128::from(tag) * (self.slots.len() / 4) as u128) >> 64) as usize
    }

    /// The slots of bucket `home` and of every bucket after it, wrapping:
    /// where `place_tagged` puts a key and `check_gcra_beyond` finds it.
    #[allow(dead_code)]
    fn slots_from(&self, home: usize) -> impl Iterator<Item = &AtomicU128> {
        let buckets = self.slots.len() / 4;
        (0..buckets).flat_map(move |i| &self.slots[(home + i) % buckets * 4..][..4])
    }

    /// GCRA on the low half of `slot`, found holding `old`, and one CAS.
    #[inline]
    fn gcra(
        slot: &AtomicU128,
        old: u128,
        t: u64,
        rule: &ratecell::state::Rule,
    ) -> ratecell::Decision {
        let mut state = [old as u64];
        let decision = rule.decide(&mut state, t, 1);
        let new = (old & !u128::from(u64::MAX)) | u128::from(state[0]);
        let _ = slot.compare_exchange(old, new, Relaxed, Relaxed);
        decision
    }

    #[inline]
    pub fn check_u64(&self, key: u64) -> bool {
        Self::bump(self.slot(key.wrapping_mul(MULTIPLIER)))
    }

    /// [`BareTable::check_u64`], returning the slot's previous value, so a
    /// caller can make its next key depend on it: then no two checks'
    /// memory accesses overlap, and the time is a check's full latency.
    #[inline]
    pub fn check_u64_value(&self, key: u64) -> u128 {
        let slot = self.slot(key.wrapping_mul(MULTIPLIER));
        let old = slot.load(Relaxed);
        let _ = slot.compare_exchange(old, old.wrapping_add(1), Relaxed, Relaxed);
        old
    }

    /// [`BareTable::check_u64`] with `K` dependent steps of arithmetic on
    /// the loaded value before the CAS (each a rotate, a shift and an XOR),
    /// standing in for a limiter's decision: how much work that waits for
    /// the slot a check can do before one check's miss no longer overlaps
    /// the next one's. Only `examples/hotpath.rs` runs it (the sixth
    /// round in docs/PERFORMANCE.md), so the bench build does not use it.
    #[allow(dead_code)]
    #[inline]
    pub fn check_u64_then<const K: usize>(&self, key: u64) -> bool {
        let slot = self.slot(key.wrapping_mul(MULTIPLIER));
        let old = slot.load(Relaxed);
        let mut v = old as u64;
        for _ in 0..K {
            v = v.rotate_left(7) ^ (v >> 3);
        }
        let new = (old & !u128::from(u64::MAX)) | u128::from(v);
        slot.compare_exchange(old, new, Relaxed, Relaxed).is_ok()
    }

    #[inline]
    pub fn check16(&self, key: &[u8; 16]) -> bool {
        let a = u64::from_le_bytes(key[..8].try_into().unwrap());
        let b = u64::from_le_bytes(key[8..].try_into().unwrap());
        Self::bump(self.slot((a.wrapping_mul(MULTIPLIER) ^ b).wrapping_mul(MULTIPLIER)))
    }
}

/// A bare table's slots: a mapping of zeroed memory (anonymous, or of a
/// file), unmapped on drop.
struct Slots {
    ptr: *mut AtomicU128,
    len: usize,
}

// SAFETY: the slots are plain memory accessed only through atomics, as a
// boxed slice of them is.
unsafe impl Send for Slots {}
// SAFETY: as above.
unsafe impl Sync for Slots {}

impl std::ops::Deref for Slots {
    type Target = [AtomicU128];

    #[inline]
    fn deref(&self) -> &[AtomicU128] {
        // SAFETY: `len` zeroed slots are mapped read-write at ptr until drop.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made for these slots; nothing
        // borrows it past the table.
        unsafe { libc::munmap(self.ptr.cast(), self.len * size_of::<AtomicU128>()) };
    }
}

/// `len` zeroed slots on memory set up as ratecell sets up its tables:
/// the whole 2 MiB pages inside advised to be huge pages, then every page
/// faulted in. The baseline gets the same TLB reach as the table it is
/// the limit of. Mapped directly, not through the allocator: once a
/// process has freed a large block (a table of an earlier case), glibc
/// serves the next one from its heap, whose pages already faulted in at
/// 4 KiB stay so whatever the advice (the baseline had then no huge pages).
fn huge_page_slots(len: usize) -> Slots {
    const HUGE: usize = 2 << 20;
    assert!(len > 0, "bare table: no slots");
    let bytes = len * size_of::<AtomicU128>();
    // SAFETY: a fresh private anonymous mapping chosen by the kernel.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert!(ptr != libc::MAP_FAILED, "bare table: out of memory");
    let start = (ptr as usize).next_multiple_of(HUGE);
    let end = (ptr as usize + bytes) & !(HUGE - 1);
    if end > start {
        // SAFETY: a page-aligned range inside the mapping; advice only.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
    let ptr = ptr.cast::<u8>();
    for offset in (0..bytes).step_by(4096) {
        // SAFETY: inside the mapping; writes the zero already there.
        unsafe { ptr.add(offset).write_volatile(0) };
    }
    Slots {
        ptr: ptr.cast(),
        len,
    }
}

/// The physical limit of a direct limiter: one load and one CAS on a word
/// alone on its cache line (the padding is the point: ratecell's cells are
/// padded the same way).
#[derive(Default)]
pub struct BareCell {
    word: CachePadded<AtomicU64>,
}

impl BareCell {
    #[inline]
    pub fn cas(&self) -> bool {
        self.cas_with(1)
    }

    /// A statistics-style increment: a relaxed `fetch_add` (`lock xadd`).
    #[inline]
    pub fn count(&self) -> bool {
        self.word.fetch_add(1, Relaxed) != u64::MAX
    }

    /// A CAS whose new value depends on `x` (a time just read), so the
    /// dependency from the input to the CAS is as in a limiter.
    #[inline]
    pub fn cas_with(&self, x: u64) -> bool {
        let old = self.word.load(Relaxed);
        self.word
            .compare_exchange(old, old.max(x).wrapping_add(1), Relaxed, Relaxed)
            .is_ok()
    }
}

/// A bare CAS followed by a relaxed `fetch_add` on a second padded word:
/// what a check costs once it also bumps a statistics counter, as ratecell's
/// do. The difference from [`BareCell`] is the price of one more locked
/// instruction per check.
#[derive(Default)]
pub struct BareCountedCell {
    cell: BareCell,
    count: CachePadded<AtomicU64>,
}

impl BareCountedCell {
    #[inline]
    pub fn cas(&self) -> bool {
        let ok = self.cell.cas();
        self.count.fetch_add(1, Relaxed);
        ok
    }
}

/// The same for a 16-byte word (`lock cmpxchg16b`), the width of ratecell's
/// two-word states.
#[derive(Default)]
pub struct BareWideCell {
    word: CachePadded<AtomicU128>,
}

impl BareWideCell {
    #[inline]
    pub fn cas(&self) -> bool {
        let old = self.word.load(Relaxed);
        self.word
            .compare_exchange(old, old.wrapping_add(1), Relaxed, Relaxed)
            .is_ok()
    }
}

/// The least a check on states too wide for one CAS does around its
/// decision: count itself in flight for the fork barrier (a `SeqCst`
/// `fetch_add` on the thread's padded stripe and a load of the fork flag),
/// take the latch (a CAS on a padded header), and release both with plain
/// stores, as ratecell's block cells do.
#[derive(Default)]
pub struct BareLatch {
    in_flight: CachePadded<AtomicU64>,
    forking: CachePadded<AtomicU64>,
    header: CachePadded<AtomicU64>,
}

impl BareLatch {
    #[inline]
    pub fn with<R>(&self, under: impl FnOnce() -> R) -> R {
        self.in_flight.fetch_add(1, SeqCst);
        assert_eq!(self.forking.load(SeqCst), 0, "nothing forks in a bench");
        while self
            .header
            .compare_exchange_weak(0, 1 << 63, Acquire, Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        let result = under();
        self.header.store(0, Release);
        self.in_flight
            .store(self.in_flight.load(Relaxed) - 1, Release);
        result
    }
}

/// Runs `work(thread, iters)` on `threads` threads released together by a
/// barrier, and returns the wall time from the release until the last one
/// finished: the time each thread took for `iters` checks while the others
/// ran theirs.
pub fn run_threads(threads: usize, iters: u64, work: &(dyn Fn(usize, u64) + Sync)) -> Duration {
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let others: Vec<_> = (1..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    work(t, iters);
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        work(0, iters);
        for other in others {
            other.join().expect("a benchmark thread panicked");
        }
        start.elapsed()
    })
}

/// `iters` calls of `check` over `keys`, round and round.
#[inline]
pub fn over_keys<K, R>(keys: &[K], iters: u64, check: impl Fn(&K) -> R) {
    let mut cycle = Cycle::new(keys);
    for _ in 0..iters {
        black_box(check(cycle.next_item()));
    }
}
