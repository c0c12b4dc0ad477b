package bench_test

// Benchmarks of ratecell through cgo beside what Go services use today:
// golang.org/x/time/rate (one limiter, and per key as users build it: a map
// of *rate.Limiter under a sync.Mutex) and go.uber.org/ratelimit (the same
// map, of ratelimit.Limiter).
//
// Every limiter runs at 10^9 units per second, so every request is
// admitted: x/time/rate and ratecell never deny, and uber's Take, which
// sleeps to space calls 1/rate apart, never has to sleep (calls come
// further apart than 1 ns). What is measured is the bookkeeping of one
// admitted request, which is what a limiter adds to every request it lets
// through. Per-key runs cycle through 2^20 random keys whose states are all
// made before the timer starts. One op is one request (one key); batch runs
// decide ratecellBatch keys per call and still report per key.
//
//	go test -run '^$' -bench . -benchmem

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratecell/ratecell-go"
	"github.com/ratecell/ratecell-go/bench"
	"go.uber.org/ratelimit"
	"golang.org/x/time/rate"
)

const (
	benchRate     = 1_000_000_000 // units per second, for every limiter
	benchKeys     = 1 << 20
	ratecellBatch = 256
)

var benchKeySet = sync.OnceValue(func() []uint64 {
	rng := rand.New(rand.NewPCG(7, 11))
	keys := make([]uint64, benchKeys)
	for i := range keys {
		keys[i] = rng.Uint64()
	}
	return keys
})

func benchConfig(capacity uint64) ratecell.Config {
	return ratecell.Config{Algorithm: ratecell.GCRA, Limit: benchRate, Period: time.Second, Capacity: capacity}
}

// mutexMap is the per-key limiter users write around a single-key library.
type mutexMap[L any] struct {
	mu      sync.Mutex
	m       map[uint64]L
	newOne  func() L
	created int
}

func (p *mutexMap[L]) get(key uint64) L {
	p.mu.Lock()
	l, ok := p.m[key]
	if !ok {
		l = p.newOne()
		p.m[key] = l
		p.created++
	}
	p.mu.Unlock()
	return l
}

func newXRate() *rate.Limiter { return rate.NewLimiter(benchRate, benchRate) }

func newUber() ratelimit.Limiter { return ratelimit.New(benchRate) }

// The per-key fixtures are built once per process: 2^20 limiters take a
// while, and the benchmark framework calls each function several times.
var (
	xrateKeyed = sync.OnceValue(func() *mutexMap[*rate.Limiter] {
		p := &mutexMap[*rate.Limiter]{m: make(map[uint64]*rate.Limiter, benchKeys), newOne: newXRate}
		for _, k := range benchKeySet() {
			p.get(k).Allow()
		}
		return p
	})
	uberKeyed = sync.OnceValue(func() *mutexMap[ratelimit.Limiter] {
		p := &mutexMap[ratelimit.Limiter]{m: make(map[uint64]ratelimit.Limiter, benchKeys), newOne: newUber}
		for _, k := range benchKeySet() {
			p.get(k).Take()
		}
		return p
	})
	ratecellKeyed = sync.OnceValues(func() (*ratecell.Limiter, error) {
		l, err := ratecell.New(benchConfig(benchKeys))
		if err != nil {
			return nil, err
		}
		for _, k := range benchKeySet() {
			l.Check(ratecell.Request{Key: ratecell.Uint64Key(k)})
		}
		return l, nil
	})
)

func mustRatecell(b *testing.B, cfg ratecell.Config) *ratecell.Limiter {
	b.Helper()
	l, err := ratecell.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

func mustRatecellKeyed(b *testing.B) *ratecell.Limiter {
	b.Helper()
	l, err := ratecellKeyed()
	if err != nil {
		b.Fatal(err)
	}
	return l
}

var sink bool

// timed runs loop(b.N), the measured loop, with the goroutine locked to its
// thread, and reports beside ns/op (wall time) the thread's CPU time per op
// (cpu-ns/op): on a machine shared with other jobs the wall time counts the
// slices they take, the CPU time does not. Compare ratios of one run.
func timed(b *testing.B, loop func(n int)) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	start := bench.ThreadCPUNs()
	loop(b.N)
	cpu := bench.ThreadCPUNs() - start
	b.StopTimer()
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}

func mustDirect(b *testing.B, capacity uint64) bench.Direct {
	b.Helper()
	d, err := bench.NewDirect(capacity)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(d.Close)
	return d
}

func BenchmarkOneKey(b *testing.B) {
	coarse := benchConfig(0)
	coarse.Clock = ratecell.ClockCoarse
	for _, c := range []struct {
		name  string
		cfg   ratecell.Config
		allow bool // Allow(0) instead of Check(ratecell.Request{})
	}{
		{"ratecell", benchConfig(0), false}, {"ratecell-coarse-clock", coarse, false},
		{"ratecell-allow", benchConfig(0), true}, {"ratecell-coarse-clock-allow", coarse, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			l := mustRatecell(b, c.cfg)
			ok := true
			timed(b, func(n int) {
				for i := 0; i < n; i++ {
					if c.allow {
						allowed, _ := l.Allow(0)
						ok = ok && allowed
					} else {
						d, _ := l.Check(ratecell.Request{})
						ok = ok && d.Allowed
					}
				}
			})
			sink = ok
		})
	}
	// The floor of Allow through any cgo binding: ratecell_allow
	// called from C, one cgo call per request, nothing else.
	b.Run("floor-c-abi-allow", func(b *testing.B) {
		d := mustDirect(b, 0)
		n := 0
		timed(b, func(ops int) {
			for i := 0; i < ops; i++ {
				n += d.Allow(0)
			}
		})
		sink = n >= 0
	})
	b.Run("ratecell-batch", func(b *testing.B) {
		l := mustRatecell(b, benchConfig(0))
		keys := make([]uint64, ratecellBatch)
		allowed := make([]bool, ratecellBatch)
		timed(b, func(ops int) {
			for i := 0; i < ops; i += ratecellBatch {
				n := min(ratecellBatch, ops-i)
				l.CheckBatch(ratecell.Batch{Keys: keys[:n]}, allowed[:n], nil)
			}
		})
	})
	b.Run("x-time-rate", func(b *testing.B) {
		l := newXRate()
		ok := true
		timed(b, func(n int) {
			for i := 0; i < n; i++ {
				ok = ok && l.Allow()
			}
		})
		sink = ok
	})
	b.Run("uber-ratelimit", func(b *testing.B) {
		l := newUber()
		timed(b, func(n int) {
			for i := 0; i < n; i++ {
				l.Take()
			}
		})
	})
}

// BenchmarkCgoFloor is an empty cgo call: the least any ratecell call
// through the binding can cost, in the same run as the others.
func BenchmarkCgoFloor(b *testing.B) {
	var n int
	timed(b, func(ops int) {
		for i := 0; i < ops; i++ {
			n += bench.EmptyCall(0, uint64(i))
		}
	})
	sink = n >= 0
}

// keys1K are 1024 keys of the key set: a table and a map that stay in cache.
const keys1K = 1 << 10

func BenchmarkKeys1K(b *testing.B) {
	keys := benchKeySet()[:keys1K]
	coarse := benchConfig(keys1K)
	coarse.Clock = ratecell.ClockCoarse
	for _, c := range []struct {
		name string
		cfg  ratecell.Config
	}{{"ratecell", benchConfig(keys1K)}, {"ratecell-coarse-clock", coarse}} {
		b.Run(c.name, func(b *testing.B) {
			l := mustRatecell(b, c.cfg)
			for _, k := range keys {
				l.Check(ratecell.Request{Key: ratecell.Uint64Key(k)})
			}
			ok := true
			timed(b, func(n int) {
				for i := 0; i < n; i++ {
					d, _ := l.Check(ratecell.Request{Key: ratecell.Uint64Key(keys[i&(keys1K-1)])})
					ok = ok && d.Allowed
				}
			})
			sink = ok
		})
	}
	// The floor of Check through any cgo binding: ratecell_check called
	// from C, one cgo call per request, nothing else.
	b.Run("floor-c-abi-check", func(b *testing.B) {
		d := mustDirect(b, keys1K)
		for _, k := range keys {
			d.Check(k)
		}
		ok := true
		timed(b, func(n int) {
			for i := 0; i < n; i++ {
				ok = d.Check(keys[i&(keys1K-1)]) && ok
			}
		})
		sink = ok
	})
	// The same with the whole decision written to Go memory and every field
	// read, as a Check that returns a Decision must.
	b.Run("floor-c-abi-check-decision", func(b *testing.B) {
		d := mustDirect(b, keys1K)
		for _, k := range keys {
			d.Check(k)
		}
		var sum uint64
		ok := true
		timed(b, func(n int) {
			for i := 0; i < n; i++ {
				var x bench.Decision
				ok = d.CheckInto(keys[i&(keys1K-1)], &x) && x.Allowed && ok
				sum += x.Limit + x.Remaining + x.RetryAfter + x.ResetAfter + x.Wait
			}
		})
		sink = ok && sum > 0
	})
	b.Run("x-time-rate-map-mutex", func(b *testing.B) {
		p := &mutexMap[*rate.Limiter]{m: make(map[uint64]*rate.Limiter, keys1K), newOne: newXRate}
		for _, k := range keys {
			p.get(k).Allow()
		}
		ok := true
		timed(b, func(n int) {
			for i := 0; i < n; i++ {
				ok = p.get(keys[i&(keys1K-1)]).Allow() && ok
			}
		})
		sink = ok
	})
}

func BenchmarkOneKeyParallel(b *testing.B) {
	b.Run("ratecell", func(b *testing.B) {
		l := mustRatecell(b, benchConfig(0))
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Check(ratecell.Request{})
			}
		})
	})
	b.Run("x-time-rate", func(b *testing.B) {
		l := newXRate()
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Allow()
			}
		})
	})
	b.Run("uber-ratelimit", func(b *testing.B) {
		l := newUber()
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Take()
			}
		})
	})
}

func BenchmarkKeys1M(b *testing.B) {
	keys := benchKeySet()
	mask := len(keys) - 1
	b.Run("ratecell", func(b *testing.B) {
		l := mustRatecellKeyed(b)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			l.Check(ratecell.Request{Key: ratecell.Uint64Key(keys[i&mask])})
		}
	})
	b.Run("ratecell-batch", func(b *testing.B) {
		l := mustRatecellKeyed(b)
		allowed := make([]bool, ratecellBatch)
		b.ReportAllocs()
		b.ResetTimer()
		// Batches are whole aligned runs of the key set (2^20 is a multiple
		// of the batch size), the last one cut to b.N.
		for i := 0; i < b.N; i += ratecellBatch {
			n := min(ratecellBatch, b.N-i)
			start := i & mask
			l.CheckBatch(ratecell.Batch{Keys: keys[start : start+n]}, allowed[:n], nil)
		}
	})
	b.Run("x-time-rate-map-mutex", func(b *testing.B) {
		p := xrateKeyed()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			p.get(keys[i&mask]).Allow()
		}
	})
	b.Run("uber-ratelimit-map-mutex", func(b *testing.B) {
		p := uberKeyed()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			p.get(keys[i&mask]).Take()
		}
	})
}

func BenchmarkKeys1MParallel(b *testing.B) {
	keys := benchKeySet()
	mask := len(keys) - 1
	parallel := func(b *testing.B, check func(key uint64)) {
		var seed atomic.Uint64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seed.Add(1) * 0x9E3779B97F4A7C15 >> 44) // each goroutine starts elsewhere
			for pb.Next() {
				check(keys[i&mask])
				i++
			}
		})
	}
	b.Run("ratecell", func(b *testing.B) {
		l := mustRatecellKeyed(b)
		parallel(b, func(k uint64) { l.Check(ratecell.Request{Key: ratecell.Uint64Key(k)}) })
	})
	b.Run("x-time-rate-map-mutex", func(b *testing.B) {
		p := xrateKeyed()
		parallel(b, func(k uint64) { p.get(k).Allow() })
	})
	b.Run("uber-ratelimit-map-mutex", func(b *testing.B) {
		p := uberKeyed()
		parallel(b, func(k uint64) { p.get(k).Take() })
	})
}

// The fixtures admit every request: if they did not, the figures above
// would measure denials for some peers and admissions for others.
func TestBenchmarkFixturesAdmitEverything(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 2^20-key fixtures")
	}
	l, err := ratecell.New(benchConfig(benchKeys))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	keys := benchKeySet()[:4096]
	allowed := make([]bool, len(keys))
	for round := 0; round < 3; round++ {
		if err := l.CheckBatch(ratecell.Batch{Keys: keys}, allowed, nil); err != nil {
			t.Fatal(err)
		}
		for i, ok := range allowed {
			if !ok {
				t.Fatalf("round %d: key %d denied", round, i)
			}
		}
		for _, k := range keys {
			if d, _ := l.Check(ratecell.Request{Key: ratecell.Uint64Key(k)}); !d.Allowed {
				t.Fatalf("key %#x denied", k)
			}
		}
	}
	x := newXRate()
	for i := 0; i < 100_000; i++ {
		if !x.Allow() {
			t.Fatalf("x/time/rate denied request %d", i)
		}
	}
	u := newUber()
	start := time.Now()
	for i := 0; i < 100_000; i++ {
		u.Take()
	}
	// 10^5 takes at 10^9/s may sleep 100 µs in all; far more means Take slept.
	if took := time.Since(start); took > 200*time.Millisecond {
		t.Fatalf("uber Take took %v for 10^5 calls", took)
	}
}
