//! A criterion measurement of the benchmark thread's CPU time
//! (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`), in nanoseconds.
//!
//! This machine is shared: other jobs take time slices from the benchmark
//! thread at random, and wall-clock samples taken while it waits swell by
//! the length of the wait. CPU time counts only the time the thread ran, so
//! a case and its peer measured minutes apart stay comparable. What it
//! cannot remove is the cache another job evicted meanwhile. Cases with
//! several threads are measured in wall-clock time instead (their point is
//! how long the whole work takes).

use criterion::Throughput;
use criterion::measurement::{Measurement, ValueFormatter};

/// CPU time of the calling thread, ns.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration;
    // CLOCK_THREAD_CPUTIME_ID is supported on every Linux and macOS.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The measurement: criterion calls `start`/`end` around each sample (many
/// iterations), so the clock's own cost (a system call) is spread thin.
pub struct ThreadCpuTime;

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, value: &u64) -> f64 {
        *value as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuNanos
    }
}

/// Reports values as CPU nanoseconds, throughputs per CPU second.
struct CpuNanos;

impl ValueFormatter for CpuNanos {
    fn scale_values(&self, _typical: f64, _values: &mut [f64]) -> &'static str {
        "ns (cpu)"
    }

    fn scale_throughputs(
        &self,
        _typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let per = match *throughput {
            Throughput::Elements(n) | Throughput::Bytes(n) | Throughput::BytesDecimal(n) => n,
            Throughput::Bits(n) => n,
            _ => 1,
        };
        for v in values {
            *v = per as f64 * 1e3 / *v;
        }
        "M/cpu-s"
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}
