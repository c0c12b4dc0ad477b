package ratecell

// What the in-flight guard (one atomic add on entry, one on exit, so that
// Close never frees a handle under a running call) costs per call, single
// goroutine and with every core on one limiter.

import (
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

func guardLimiter(b *testing.B, capacity uint64) *Limiter {
	l, err := New(Config{Algorithm: GCRA, Limit: 1_000_000_000, Period: time.Second, Capacity: capacity})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// threadCPUNs is this thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
func threadCPUNs() int64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

// guardTimed runs loop(b.N) on a locked thread and reports its CPU time
// per op beside the wall time: other jobs' slices do not count.
func guardTimed(b *testing.B, loop func(n int)) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	start := threadCPUNs()
	loop(b.N)
	b.ReportMetric(float64(threadCPUNs()-start)/float64(b.N), "cpu-ns/op")
}

func BenchmarkGuard(b *testing.B) {
	// One state, and 1024 keys (the hash and the table's probe in the call).
	for _, c := range []struct {
		name     string
		capacity uint64
	}{{"", 0}, {"keys1k-", 1024}} {
		b.Run(c.name+"unguarded", func(b *testing.B) {
			l := guardLimiter(b, c.capacity)
			guardTimed(b, func(n int) {
				for i := 0; i < n; i++ {
					l.checkAtUnguarded(uint64(i&1023), 1, uint64(i))
				}
			})
		})
		b.Run(c.name+"guarded", func(b *testing.B) {
			l := guardLimiter(b, c.capacity)
			guardTimed(b, func(n int) {
				for i := 0; i < n; i++ {
					l.Check(Request{Key: Uint64Key(uint64(i & 1023)), At: uint64(i)})
				}
			})
		})
	}
	b.Run("unguarded-parallel", func(b *testing.B) {
		l := guardLimiter(b, 0)
		b.RunParallel(func(pb *testing.PB) {
			for i := uint64(0); pb.Next(); i++ {
				l.checkAtUnguarded(0, 1, i)
			}
		})
	})
	b.Run("guarded-parallel", func(b *testing.B) {
		l := guardLimiter(b, 0)
		b.RunParallel(func(pb *testing.PB) {
			for i := uint64(0); pb.Next(); i++ {
				l.Check(Request{At: i})
			}
		})
	})
}
