package ratecell

// What the in-flight guard (one atomic add on entry, one on exit, so that
// Close never frees a handle under a running call) costs per call, single
// goroutine and with every core on one limiter.

import (
	"testing"
	"time"
)

func guardLimiter(b *testing.B) *Limiter {
	l, err := New(Config{Algorithm: GCRA, Limit: 1_000_000_000, Period: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

func BenchmarkGuard(b *testing.B) {
	b.Run("unguarded", func(b *testing.B) {
		l := guardLimiter(b)
		for i := 0; i < b.N; i++ {
			l.checkAtUnguarded(0, 1, uint64(i))
		}
	})
	b.Run("guarded", func(b *testing.B) {
		l := guardLimiter(b)
		for i := 0; i < b.N; i++ {
			l.CheckAt(0, 1, uint64(i))
		}
	})
	b.Run("unguarded-parallel", func(b *testing.B) {
		l := guardLimiter(b)
		b.RunParallel(func(pb *testing.PB) {
			for i := uint64(0); pb.Next(); i++ {
				l.checkAtUnguarded(0, 1, i)
			}
		})
	})
	b.Run("guarded-parallel", func(b *testing.B) {
		l := guardLimiter(b)
		b.RunParallel(func(pb *testing.PB) {
			for i := uint64(0); pb.Next(); i++ {
				l.CheckAt(0, 1, i)
			}
		})
	})
}
