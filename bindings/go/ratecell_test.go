package ratecell_test

// Tests of the Go API over the C ABI: the SPEC's worked examples, the error
// model, keys, batches, Acquire, statistics, Close and concurrency. The
// cross-language trace is replayed in parity_test.go.

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratecell/ratecell-go"
)

const (
	ms     = uint64(time.Millisecond)
	second = uint64(time.Second)
	minute = uint64(time.Minute)
	hour   = uint64(time.Hour)
	// day is 2020-04-21 00:00:00 UTC in UNIX ns, the day of the Rust suite's
	// worked examples (tests/spec_examples.rs), so windows fall on minutes.
	day = 1_587_427_200 * second
)

func at(h, m, s uint64) uint64 { return day + h*hour + m*minute + s*second }

func newLimiter(t testing.TB, cfg ratecell.Config) *ratecell.Limiter {
	t.Helper()
	l, err := ratecell.New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func check(t testing.TB, l *ratecell.Limiter, cost, now uint64) ratecell.Decision {
	t.Helper()
	d, err := l.Check(ratecell.Request{Key: ratecell.Uint64Key(1), Cost: cost, Peek: cost == 0, At: now})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return d
}

func admitted(limit, remaining, reset uint64) ratecell.Decision {
	return ratecell.Decision{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: time.Duration(reset)}
}

func denied(limit, remaining, retry, reset uint64) ratecell.Decision {
	return ratecell.Decision{Limit: limit, Remaining: remaining, RetryAfter: time.Duration(retry), ResetAfter: time.Duration(reset)}
}

func expect(t *testing.T, what string, got, want ratecell.Decision) {
	t.Helper()
	if got != want {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

// The worked examples of SPEC.md and the seed texts, as in the Rust suite,
// through the Go API with explicit times.
func TestSpecExamples(t *testing.T) {
	t.Run("gcra burst 6 at 100 per second", func(t *testing.T) {
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.GCRA, Limit: 100, Period: time.Second, Burst: 6})
		t0 := at(10, 0, 0) + 500*ms
		for i := uint64(1); i <= 6; i++ {
			expect(t, "burst", check(t, l, 1, t0), admitted(6, 6-i, i*10*ms))
		}
		expect(t, "seventh", check(t, l, 1, t0), denied(6, 0, 10*ms, 60*ms))
		expect(t, "one interval later", check(t, l, 1, t0+10*ms), admitted(6, 0, 60*ms))
		for i := 0; i < 3; i++ {
			if !check(t, l, 1, t0+40*ms).Allowed {
				t.Fatalf("#%d at +40 ms denied", i)
			}
		}
		expect(t, "full again", check(t, l, 1, t0+40*ms), denied(6, 0, 10*ms, 60*ms))
	})
	t.Run("gcra emission interval rounds up", func(t *testing.T) {
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.GCRA, Limit: 3, Period: time.Microsecond, Burst: 1})
		t0 := at(0, 0, 0)
		check(t, l, 1, t0)
		expect(t, "+333", check(t, l, 1, t0+333), denied(1, 0, 1, 1))
		for _, dt := range []uint64{334, 668} {
			if !check(t, l, 1, t0+dt).Allowed {
				t.Fatalf("+%d denied", dt)
			}
		}
		if check(t, l, 1, t0+1000).Allowed {
			t.Fatal("a fourth within the microsecond")
		}
	})
	t.Run("leaky bucket waits are queue places", func(t *testing.T) {
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.LeakyBucket, Limit: 10, Period: time.Second, Burst: 5})
		t0 := at(12, 0, 0)
		for i := uint64(0); i < 5; i++ {
			want := admitted(5, 4-i, (i+1)*100*ms)
			want.Wait = time.Duration(i * 100 * ms)
			expect(t, "place", check(t, l, 1, t0), want)
		}
		expect(t, "queue full", check(t, l, 1, t0), denied(5, 0, 100*ms, 500*ms))
		if d := check(t, l, 1, t0+100*ms); !d.Allowed || d.Wait != 400*time.Millisecond {
			t.Fatalf("newcomer: %+v", d)
		}
	})
	t.Run("token bucket 3 per minute", func(t *testing.T) {
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.TokenBucket, Limit: 3, Period: time.Minute})
		expect(t, "00:10", check(t, l, 1, at(0, 0, 10)), admitted(3, 2, 60*second))
		expect(t, "00:20", check(t, l, 1, at(0, 0, 20)), admitted(3, 1, 50*second))
		expect(t, "00:30", check(t, l, 1, at(0, 0, 30)), admitted(3, 0, 40*second))
		expect(t, "00:40", check(t, l, 1, at(0, 0, 40)), denied(3, 0, 30*second, 30*second))
		if r := check(t, l, 0, at(0, 1, 9)).Remaining; r != 0 {
			t.Fatalf("peek before the refill: remaining %d", r)
		}
		expect(t, "01:10", check(t, l, 1, at(0, 1, 10)), admitted(3, 2, 60*second))
	})
	t.Run("fixed window 2 per minute", func(t *testing.T) {
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 2, Period: time.Minute})
		expect(t, "00:24", check(t, l, 1, at(0, 0, 24)), admitted(2, 1, 36*second))
		expect(t, "00:36", check(t, l, 1, at(0, 0, 36)), admitted(2, 0, 24*second))
		expect(t, "00:49", check(t, l, 1, at(0, 0, 49)), denied(2, 0, 11*second, 11*second))
		expect(t, "01:12", check(t, l, 1, at(0, 1, 12)), admitted(2, 1, 48*second))
	})
	t.Run("sliding window prev 88 cur 12 at 15 s", func(t *testing.T) {
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.SlidingWindow, Limit: 100, Period: time.Minute})
		w := at(10, 2, 0)
		for i := uint64(0); i < 88; i++ {
			if !check(t, l, 1, w-minute+i*500*ms).Allowed {
				t.Fatalf("prev #%d denied", i)
			}
		}
		for i := 0; i < 12; i++ {
			if !check(t, l, 1, w).Allowed {
				t.Fatalf("cur #%d denied", i)
			}
		}
		expect(t, "13th", check(t, l, 1, w), denied(100, 0, 681_818_182, 2*minute))
		expect(t, "02:15", check(t, l, 1, w+15*second), admitted(100, 21, 2*minute-15*second))
	})
	t.Run("sliding window prev 9 cur 5 at 25 percent", func(t *testing.T) {
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.SlidingWindow, Limit: 10, Period: time.Minute})
		for i := uint64(0); i < 9; i++ {
			check(t, l, 1, at(0, 0, 5*i))
		}
		for i := 0; i < 5; i++ {
			check(t, l, 1, at(0, 1, 50))
		}
		expect(t, "01:15", check(t, l, 1, at(0, 1, 15)), denied(10, 0, 18_333_333_334, 105*second))
		if check(t, l, 1, at(0, 1, 15)+18_333_333_333).Allowed {
			t.Fatal("admitted 1 ns before retry_after")
		}
		if !check(t, l, 1, at(0, 1, 15)+18_333_333_334).Allowed {
			t.Fatal("denied at retry_after")
		}
	})
	t.Run("bucketed window 500 per hour by minute", func(t *testing.T) {
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.BucketedWindow, Limit: 500, Period: time.Hour, SubWindows: 60})
		h := at(10, 0, 0)
		for i := 0; i < 300; i++ {
			check(t, l, 1, h+10*second)
		}
		for i := 0; i < 200; i++ {
			check(t, l, 1, h+30*minute)
		}
		expect(t, "10:59:59", check(t, l, 1, at(10, 59, 59)), denied(500, 0, second, 30*minute+second))
		expect(t, "301 units", check(t, l, 301, at(10, 59, 59)), denied(500, 0, 30*minute+second, 30*minute+second))
		expect(t, "11:00 takes 300", check(t, l, 300, at(11, 0, 0)), admitted(500, 0, hour))
	})
	t.Run("sliding log 2 per minute", func(t *testing.T) {
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.SlidingLog, Limit: 2, Period: time.Minute})
		expect(t, "01:00", check(t, l, 1, at(0, 1, 0)), admitted(2, 1, minute))
		expect(t, "01:20", check(t, l, 1, at(0, 1, 20)), admitted(2, 0, minute))
		expect(t, "01:45", check(t, l, 1, at(0, 1, 45)), denied(2, 0, 15*second, 35*second))
		expect(t, "02:25", check(t, l, 1, at(0, 2, 25)), admitted(2, 1, minute))
	})
	t.Run("cost above the limit is never admitted", func(t *testing.T) {
		for _, alg := range ratecell.Algorithms {
			l := newLimiter(t, ratecell.Config{Algorithm: alg, Limit: 4, Period: time.Second})
			if d := check(t, l, 5, at(1, 0, 0)); d.Allowed || d.RetryAfter != ratecell.Never {
				t.Fatalf("%v: cost 5 of 4: %+v", alg, d)
			}
		}
	})
}

func TestInvalidConfigNamesTheField(t *testing.T) {
	valid := ratecell.Config{Algorithm: ratecell.GCRA, Limit: 10, Period: time.Second}
	with := func(f func(*ratecell.Config)) ratecell.Config {
		c := valid
		f(&c)
		return c
	}
	sentinels := []error{
		ratecell.ErrInvalidAlgorithm, ratecell.ErrInvalidLimit, ratecell.ErrInvalidPeriod,
		ratecell.ErrInvalidBurst, ratecell.ErrInvalidSubWindows, ratecell.ErrInvalidCapacity,
		ratecell.ErrInvalidOverflow, ratecell.ErrInvalidClock, ratecell.ErrOutOfMemory,
	}
	cases := []struct {
		name   string
		cfg    ratecell.Config
		want   error
		status ratecell.Status
	}{
		{"algorithm 0", with(func(c *ratecell.Config) { c.Algorithm = 0 }), ratecell.ErrInvalidAlgorithm, ratecell.StatusInvalidAlgorithm},
		{"algorithm 8", with(func(c *ratecell.Config) { c.Algorithm = 8 }), ratecell.ErrInvalidAlgorithm, ratecell.StatusInvalidAlgorithm},
		{"enum fields first", ratecell.Config{Algorithm: 99}, ratecell.ErrInvalidAlgorithm, ratecell.StatusInvalidAlgorithm},
		{"limit 0", with(func(c *ratecell.Config) { c.Limit = 0 }), ratecell.ErrInvalidLimit, ratecell.StatusInvalidLimit},
		{"limit 2^32", with(func(c *ratecell.Config) { c.Limit = 1 << 32 }), ratecell.ErrInvalidLimit, ratecell.StatusInvalidLimit},
		{"gcra limit above period ns", with(func(c *ratecell.Config) { c.Limit, c.Period = 2000, time.Microsecond }), ratecell.ErrInvalidLimit, ratecell.StatusInvalidLimit},
		{"period 999 ns", with(func(c *ratecell.Config) { c.Period = 999 }), ratecell.ErrInvalidPeriod, ratecell.StatusInvalidPeriodNs},
		{"period 367 days", with(func(c *ratecell.Config) { c.Period = 367 * 24 * time.Hour }), ratecell.ErrInvalidPeriod, ratecell.StatusInvalidPeriodNs},
		{"period negative", with(func(c *ratecell.Config) { c.Period = -time.Second }), ratecell.ErrInvalidPeriod, ratecell.StatusInvalidPeriodNs},
		{"burst 2^32", with(func(c *ratecell.Config) { c.Burst = 1 << 32 }), ratecell.ErrInvalidBurst, ratecell.StatusInvalidBurst},
		{"window burst other than limit", ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 5, Period: time.Second, Burst: 3}, ratecell.ErrInvalidBurst, ratecell.StatusInvalidBurst},
		{"sub_windows 65", ratecell.Config{Algorithm: ratecell.BucketedWindow, Limit: 5, Period: 65 * time.Second, SubWindows: 65}, ratecell.ErrInvalidSubWindows, ratecell.StatusInvalidSubWindows},
		{"sub_windows not dividing", ratecell.Config{Algorithm: ratecell.BucketedWindow, Limit: 5, Period: time.Second, SubWindows: 7}, ratecell.ErrInvalidSubWindows, ratecell.StatusInvalidSubWindows},
		{"overflow 3", with(func(c *ratecell.Config) { c.Overflow = 3 }), ratecell.ErrInvalidOverflow, ratecell.StatusInvalidOverflow},
		{"clock 2", with(func(c *ratecell.Config) { c.Clock = 2 }), ratecell.ErrInvalidClock, ratecell.StatusInvalidClock},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := ratecell.New(tc.cfg)
			if l != nil || err == nil {
				t.Fatalf("New accepted %+v", tc.cfg)
			}
			for _, s := range sentinels {
				if got := errors.Is(err, s); got != (s == tc.want) {
					t.Errorf("errors.Is(%v, %v) = %v", err, s, got)
				}
			}
			var e *ratecell.Error
			if !errors.As(err, &e) || e.Status != tc.status || e.Op != "new" {
				t.Fatalf("errors.As: %#v", err)
			}
			if err.Error() != "ratecell: new: "+tc.status.String() {
				t.Fatalf("message %q", err.Error())
			}
		})
	}
	// A table larger than memory: the library reports out of memory (the
	// header allows invalid capacity too, for sizes it can refuse up front).
	_, err := ratecell.New(with(func(c *ratecell.Config) { c.Capacity = math.MaxUint64 }))
	var e *ratecell.Error
	if !errors.As(err, &e) || (e.Status != ratecell.StatusOutOfMemory && e.Status != ratecell.StatusInvalidCapacity) ||
		errors.Is(err, ratecell.ErrOutOfMemory) == errors.Is(err, ratecell.ErrInvalidCapacity) {
		t.Errorf("capacity 2^64-1: %v", err)
	}
	// The limits themselves are valid.
	for _, cfg := range []ratecell.Config{
		with(func(c *ratecell.Config) { c.Limit = 1<<32 - 1; c.Period = 366 * 24 * time.Hour }),
		with(func(c *ratecell.Config) { c.Period = time.Microsecond; c.Limit = 1000 }),
		{Algorithm: ratecell.BucketedWindow, Limit: 5, Period: 64 * time.Second, SubWindows: 64},
	} {
		newLimiter(t, cfg)
	}
}

func TestStatuses(t *testing.T) {
	seen := map[string]bool{}
	for s := ratecell.StatusOK; s <= ratecell.StatusDenied; s++ {
		text := s.String()
		if text == "" || text == "unknown status" || seen[text] {
			t.Errorf("status %d (%s): description %q", s, s.Name(), text)
		}
		seen[text] = true
	}
	if got := ratecell.Status(41).String(); got != "unknown status" {
		t.Errorf("status 41: %q", got)
	}
	if ratecell.StatusDenied.Name() != "DENIED" {
		t.Error("DENIED name")
	}
	if ratecell.StatusInvalidStates.Name() != "INVALID_STATES" {
		t.Error("INVALID_STATES name")
	}
	if ratecell.StatusInvalidGrant.Name() != "INVALID_GRANT" || ratecell.StatusNotLeasable.Name() != "NOT_LEASABLE" {
		t.Error("lease status names")
	}
	if ratecell.StatusInvalidTier.Name() != "INVALID_TIER" {
		t.Error("INVALID_TIER name")
	}
	if ratecell.StatusReconfigureRefused.Name() != "RECONFIGURE_REFUSED" {
		t.Error("RECONFIGURE_REFUSED name")
	}
	if ratecell.StatusInvalidLimit.Name() != "INVALID_LIMIT" || ratecell.Status(99).Name() != "STATUS_99" {
		t.Error("Name")
	}
	// A sentinel matches only itself; wrapped errors still match.
	err := &ratecell.Error{Op: "check", Status: ratecell.StatusInvalidLength}
	wrapped := errors.Join(errors.New("context"), err)
	if !errors.Is(wrapped, ratecell.ErrInvalidLength) || errors.Is(wrapped, ratecell.ErrTimedOut) {
		t.Error("errors.Is through a wrapper")
	}
	if errors.Is(ratecell.ErrTimedOut, err) {
		t.Error("an error with an Op is no sentinel")
	}
}

func TestAlgorithmNames(t *testing.T) {
	names := []string{"gcra", "leaky_bucket", "token_bucket", "fixed_window", "sliding_window", "bucketed_window", "sliding_log"}
	for i, alg := range ratecell.Algorithms {
		if alg.String() != names[i] {
			t.Errorf("%d: %q", alg, alg.String())
		}
		got, err := ratecell.ParseAlgorithm(names[i])
		if err != nil || got != alg {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", names[i], got, err)
		}
	}
	if got, err := ratecell.ParseAlgorithm("leaky-bucket"); err != nil || got != ratecell.LeakyBucket {
		t.Errorf("dashes: %v, %v", got, err)
	}
	for _, bad := range []string{"", "gcra2", "token"} {
		if _, err := ratecell.ParseAlgorithm(bad); !errors.Is(err, ratecell.ErrUnknownAlgorithm) {
			t.Errorf("ParseAlgorithm(%q): %v", bad, err)
		}
	}
	if ratecell.Algorithm(0).String() != "Algorithm(0)" {
		t.Error(ratecell.Algorithm(0).String())
	}
}

func TestVersionIsCargos(t *testing.T) {
	manifest, err := os.ReadFile("../../Cargo.toml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^version = "([^"]+)"`).FindSubmatch(manifest)
	if m == nil || ratecell.Version() != string(m[1]) {
		t.Fatalf("Version() = %q, Cargo.toml has %q", ratecell.Version(), m)
	}
}

func TestConfigReadsBack(t *testing.T) {
	cfg := ratecell.Config{
		Algorithm: ratecell.TokenBucket, Limit: 7, Period: 3 * time.Second, Burst: 9,
		Capacity: 100, Overflow: ratecell.OverflowAllow, Clock: ratecell.ClockCoarse,
	}
	got, err := newLimiter(t, cfg).Config()
	want := cfg
	want.SubWindows = 10 // the default for a period that 10 divides
	if err != nil || got != want {
		t.Fatalf("Config() = %+v, %v; want %+v", got, err, want)
	}
	got, _ = newLimiter(t, ratecell.Config{Algorithm: ratecell.BucketedWindow, Limit: 3, Period: 7001}).Config()
	if got.SubWindows != 1 || got.Burst != 0 {
		t.Fatalf("defaults for P = 7001 ns: %+v", got)
	}
}

func TestNowFollowsTheWallClock(t *testing.T) {
	l := newLimiter(t, ratecell.Config{Algorithm: ratecell.GCRA, Limit: 1, Period: time.Second})
	now, err := l.Now()
	wall := uint64(time.Now().UnixNano())
	if err != nil || now+uint64(time.Second) < wall || now > wall+uint64(time.Second) {
		t.Fatalf("Now() = %d, %v; wall clock %d", now, err, wall)
	}
	later, _ := l.Now()
	if later < now {
		t.Fatalf("went back: %d then %d", now, later)
	}
}

func TestByteKeys(t *testing.T) {
	// 366-day windows: calls on the real clock meet no window edge.
	l := newLimiter(t, ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 3, Period: 366 * 24 * time.Hour, Capacity: 1000})
	now := at(9, 0, 0)
	// The uint64 key 0x0102030405060708 is its little-endian bytes.
	le := []byte{8, 7, 6, 5, 4, 3, 2, 1}
	if d, _ := l.Check(ratecell.Request{Key: ratecell.Uint64Key(0x0102030405060708), Cost: 2, At: now}); d.Remaining != 1 {
		t.Fatalf("u64 key: %+v", d)
	}
	if d, _ := l.Check(ratecell.Request{Key: ratecell.BytesKey(le), At: now}); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("same key as bytes: %+v", d)
	}
	if d, _ := l.Check(ratecell.Request{Key: ratecell.BytesKey([]byte{1, 2, 3, 4, 5, 6, 7, 8}), At: now}); d.Remaining != 2 {
		t.Fatalf("big-endian bytes are another key: %+v", d)
	}
	// Strings and bytes are one key space; the empty key is a key.
	for i := 0; i < 3; i++ {
		if d, err := l.Check(ratecell.Request{Key: ratecell.StringKey("user-42")}); err != nil || !d.Allowed {
			t.Fatalf("Check of a string key #%d: %+v, %v", i, d, err)
		}
	}
	if d, _ := l.Check(ratecell.Request{Key: ratecell.BytesKey([]byte("user-42")), Peek: true}); d.Allowed || d.Remaining != 0 {
		t.Fatalf("the string's key as bytes: %+v", d)
	}
	if d, _ := l.Check(ratecell.Request{Key: ratecell.BytesKey(nil), Cost: 3}); !d.Allowed {
		t.Fatalf("empty key: %+v", d)
	}
	if d, _ := l.Check(ratecell.Request{Key: ratecell.StringKey("")}); d.Allowed {
		t.Fatalf("empty string is the empty key: %+v", d)
	}
	// Reset forgets one key, a byte key or a number.
	if err := l.Reset(ratecell.BytesKey([]byte("user-42"))); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Check(ratecell.Request{Key: ratecell.StringKey("user-42"), Peek: true}); d.Remaining != 3 {
		t.Fatalf("after ResetBytes: %+v", d)
	}
	if err := l.Reset(ratecell.Uint64Key(0x0102030405060708)); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Check(ratecell.Request{Key: ratecell.BytesKey(le), Peek: true, At: now}); d.Remaining != 3 {
		t.Fatalf("after Reset, the bytes key is fresh: %+v", d)
	}
	if d, _ := l.Check(ratecell.Request{Key: ratecell.BytesKey(nil), Peek: true}); d.Remaining != 0 {
		t.Fatalf("the empty key kept its state: %+v", d)
	}

	// Capacity 0: one shared state, every key ignored.
	shared := newLimiter(t, ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 2, Period: time.Minute})
	shared.Check(ratecell.Request{Key: ratecell.Uint64Key(1), At: now})
	shared.Check(ratecell.Request{Key: ratecell.BytesKey([]byte("x")), At: now})
	if d, _ := shared.Check(ratecell.Request{Key: ratecell.Uint64Key(99), At: now}); d.Allowed {
		t.Fatalf("capacity 0 keeps one state: %+v", d)
	}
	shared.Reset(ratecell.Uint64Key(12345))
	if d, _ := shared.Check(ratecell.Request{Key: ratecell.Uint64Key(7), At: now}); !d.Allowed {
		t.Fatalf("Reset on capacity 0 resets the state: %+v", d)
	}
}

// Allow is the yes or no of a cost-1 Check: three admitted then denied, a
// fresh key admitted only with a table, the same answers as Check on one
// sequence for every algorithm, and the form that reads the clock.
func TestAllow(t *testing.T) {
	for _, capacity := range []uint64{0, 16} {
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 3, Period: time.Hour, Capacity: capacity})
		now := at(7, 0, 0)
		for i, r := range []struct {
			key, now uint64
			want     bool
		}{
			{1, now, true}, {1, now + second, true}, {1, now + minute, true}, {1, now + minute, false},
			{2, now + minute, capacity != 0}, // capacity 0 ignores the key
			{1, now + hour - 1, false}, {1, now + hour, true},
		} {
			if got, err := l.Check(ratecell.Request{Key: ratecell.Uint64Key(r.key), At: r.now}); err != nil || got.Allowed != r.want {
				t.Fatalf("capacity %d, request %d: %v, %v; want %v", capacity, i, got.Allowed, err, r.want)
			}
		}
		if s, _ := l.Stats(); s.Checks != 7 {
			t.Fatalf("capacity %d: %+v", capacity, s)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, alg := range ratecell.Algorithms {
		for _, capacity := range []uint64{0, 16} {
			cfg := ratecell.Config{Algorithm: alg, Limit: 3, Period: time.Minute, Capacity: capacity}
			yesNo, full := newLimiter(t, cfg), newLimiter(t, cfg)
			now, admittedCount := at(8, 0, 0), 0
			for i := 0; i < 200; i++ {
				key := rng.Uint64N(3)
				now += rng.Uint64N(4) * 3 * second // about 13 requests a minute
				// The number key k and its 8 little-endian bytes: one key.
				got, err := yesNo.Check(ratecell.Request{Key: ratecell.BytesKey(binary.LittleEndian.AppendUint64(nil, key)), At: now})
				want, _ := full.Check(ratecell.Request{Key: ratecell.Uint64Key(key), At: now})
				if err != nil || got.Allowed != want.Allowed || got.Remaining != want.Remaining {
					t.Fatalf("%v cap %d #%d: bytes %+v, %v; number %+v", alg, capacity, i, got, err, want)
				}
				if got.Allowed {
					admittedCount++
				}
			}
			if admittedCount == 0 || admittedCount == 200 {
				t.Fatalf("%v cap %d: %d of 200 admitted: one answer only", alg, capacity, admittedCount)
			}
		}
	}
	// GCRA: no window edge for the real clock to cross.
	l := newLimiter(t, ratecell.Config{Algorithm: ratecell.GCRA, Limit: 2, Period: time.Hour})
	for i, want := range []bool{true, true, false} {
		if got, err := l.Allow(uint64(i)); err != nil || got != want {
			t.Fatalf("Allow #%d: %v, %v; want %v", i, got, err, want)
		}
	}
}

func TestBatchEqualsOneByOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, alg := range ratecell.Algorithms {
		for _, capacity := range []uint64{0, 256} {
			cfg := ratecell.Config{Algorithm: alg, Limit: 5, Period: 10 * time.Millisecond, Capacity: capacity}
			batched, single := newLimiter(t, cfg), newLimiter(t, cfg)
			now := at(3, 0, 0)
			for round := 0; round < 20; round++ {
				n := rng.IntN(300)
				keys, costs := make([]uint64, n), make([]uint64, n)
				for i := range keys {
					keys[i], costs[i] = rng.Uint64N(40), rng.Uint64N(4)
				}
				if round%3 == 0 {
					costs = nil // every cost 1
				}
				allowed, decisions := make([]bool, n), make([]ratecell.Decision, n)
				if err := batched.CheckBatch(ratecell.Batch{Keys: keys, Costs: costs, At: now}, allowed, decisions); err != nil {
					t.Fatal(err)
				}
				for i, k := range keys {
					cost := uint64(1)
					if costs != nil {
						cost = costs[i]
					}
					want, err := single.Check(ratecell.Request{Key: ratecell.Uint64Key(k), Cost: cost, Peek: cost == 0, At: now})
					if err != nil || decisions[i] != want || allowed[i] != want.Allowed {
						t.Fatalf("%v cap %d round %d #%d: batch %+v/%v, one by one %+v", alg, capacity, round, i, decisions[i], allowed[i], want)
					}
				}
				now += rng.Uint64N(4 * ms)
			}
		}
	}
}

func TestBatchArguments(t *testing.T) {
	// A sliding log over 366 days: no window edge for the clock to cross.
	l := newLimiter(t, ratecell.Config{Algorithm: ratecell.SlidingLog, Limit: 2, Period: 366 * 24 * time.Hour, Capacity: 100})
	keys := []uint64{1, 1, 1, 2}
	allowed := make([]bool, 4)
	if err := l.CheckBatch(ratecell.Batch{Keys: keys}, allowed, nil); err != nil {
		t.Fatal(err)
	}
	if !allowed[0] || !allowed[1] || allowed[2] || !allowed[3] {
		t.Fatalf("allowed %v", allowed)
	}
	// allowed may be left out when decisions are wanted.
	decisions := make([]ratecell.Decision, 2)
	if err := l.CheckBatch(ratecell.Batch{Keys: []uint64{3, 3}, Costs: []uint64{2, 1}}, nil, decisions); err != nil || !decisions[0].Allowed || decisions[1].Allowed {
		t.Fatalf("%+v, %v", decisions, err)
	}
	for _, bad := range []func() error{
		func() error { return l.CheckBatch(ratecell.Batch{Keys: keys, Costs: []uint64{1}}, allowed, nil) },
		func() error { return l.CheckBatch(ratecell.Batch{Keys: keys}, allowed[:3], nil) },
		func() error { return l.CheckBatch(ratecell.Batch{Keys: keys}, allowed, make([]ratecell.Decision, 5)) },
		func() error { return l.CheckBatch(ratecell.Batch{Keys: keys}, nil, nil) },
	} {
		if err := bad(); !errors.Is(err, ratecell.ErrInvalidLength) {
			t.Errorf("mismatched lengths: %v", err)
		}
	}
	if err := l.CheckBatch(ratecell.Batch{Keys: nil}, nil, nil); err != nil {
		t.Errorf("empty batch: %v", err)
	}
}

func TestStats(t *testing.T) {
	l := newLimiter(t, ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 2, Period: time.Hour, Capacity: 100})
	now := at(5, 0, 0)
	for _, key := range []uint64{1, 1, 1, 2} {
		l.Check(ratecell.Request{Key: ratecell.Uint64Key(key), At: now})
	}
	l.Check(ratecell.Request{Key: ratecell.Uint64Key(3), Peek: true, At: now}) // a peek: counted, stores nothing
	s, err := l.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Checks != 5 || s.Allowed != 4 || s.Denied != 1 || s.KeysTracked != 2 || s.Capacity != 100 || s.BytesAllocated == 0 || s.Overflows != 0 {
		t.Fatalf("%+v", s)
	}
	shared, _ := newLimiter(t, ratecell.Config{Algorithm: ratecell.GCRA, Limit: 2, Period: time.Hour}).Stats()
	if shared.Capacity != 0 || shared.KeysTracked != 0 || shared.Checks != 0 {
		t.Fatalf("capacity 0: %+v", shared)
	}
}

// A full table: new keys overflow, denied or admitted untracked by policy.
func TestOverflowPolicy(t *testing.T) {
	for _, policy := range []ratecell.Overflow{ratecell.OverflowDeny, ratecell.OverflowAllow} {
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 1, Period: time.Hour, Capacity: 16, Overflow: policy})
		now := at(6, 0, 0)
		admittedCount := uint64(0)
		const keys = 2000
		for k := uint64(0); k < keys; k++ {
			if d, _ := l.Check(ratecell.Request{Key: ratecell.Uint64Key(k), At: now}); d.Allowed {
				admittedCount++
			}
		}
		s, _ := l.Stats()
		if s.Overflows == 0 || s.KeysTracked+s.Overflows != keys {
			t.Fatalf("%v: %+v", policy, s)
		}
		want := s.KeysTracked
		if policy == ratecell.OverflowAllow {
			want = keys
		}
		if admittedCount != want {
			t.Fatalf("%v: %d admitted, want %d (%+v)", policy, admittedCount, want, s)
		}
	}
}

// A full table under OverflowEvict: every new key is admitted and tracked,
// in the place of a live state, and the evictions are counted.
func TestOverflowEvict(t *testing.T) {
	l := newLimiter(t, ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 1, Period: time.Hour, Capacity: 16, Overflow: ratecell.OverflowEvict})
	now := at(6, 0, 0)
	const keys = 2000
	for k := uint64(0); k < keys; k++ {
		if d, _ := l.Check(ratecell.Request{Key: ratecell.Uint64Key(k), At: now}); !d.Allowed {
			t.Fatalf("key %d refused: %+v", k, d)
		}
	}
	s, _ := l.Stats()
	if s.Overflows != 0 || s.EvictedLive == 0 || s.KeysTracked+s.EvictedLive != keys {
		t.Fatalf("%+v", s)
	}
	if d, _ := l.Check(ratecell.Request{Key: ratecell.Uint64Key(keys - 1), At: now}); d.Allowed {
		t.Fatalf("the last key is tracked and spent: %+v", d)
	}
}

func TestAcquire(t *testing.T) {
	ctx := context.Background()
	t.Run("waits by retry_after", func(t *testing.T) {
		// 1 per 30 ms: the second request waits the rest of the interval.
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.GCRA, Limit: 1, Period: 30 * time.Millisecond})
		if d, err := l.Acquire(ctx, ratecell.Request{}); err != nil || !d.Allowed {
			t.Fatalf("first: %+v, %v", d, err)
		}
		start := time.Now()
		if d, err := l.Acquire(ctx, ratecell.Request{}); err != nil || !d.Allowed {
			t.Fatalf("second: %+v, %v", d, err)
		}
		if waited := time.Since(start); waited < 20*time.Millisecond {
			t.Fatalf("second admitted after only %v", waited)
		}
	})
	t.Run("deadline it cannot meet gives up at once", func(t *testing.T) {
		// The deadline is an hour away and the turn a day: an Acquire that
		// waited for the deadline would take the hour. Half of it bounds
		// what the call controls (whether it waits), however slowly a
		// busy machine runs the rest.
		const deadline = time.Hour
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 1, Period: 24 * time.Hour, Capacity: 10})
		l.Check(ratecell.Request{Key: ratecell.Uint64Key(5)})
		c, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		start := time.Now()
		d, err := l.Acquire(c, ratecell.Request{Key: ratecell.Uint64Key(5)})
		if !errors.Is(err, ratecell.ErrTimedOut) || !errors.Is(err, context.DeadlineExceeded) || d.Allowed || d.RetryAfter <= deadline {
			t.Fatalf("%+v, %v", d, err)
		}
		if waited := time.Since(start); waited > deadline/2 {
			t.Fatalf("waited %v for a deadline it could not meet", waited)
		}
		s, _ := l.Stats()
		if s.Allowed != 1 {
			t.Fatalf("the time-out took from the limit: %+v", s)
		}
	})
	t.Run("expired context takes nothing", func(t *testing.T) {
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.GCRA, Limit: 1, Period: time.Second})
		c, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
		defer cancel()
		d, err := l.Acquire(c, ratecell.Request{})
		if !errors.Is(err, ratecell.ErrTimedOut) || !errors.Is(err, context.DeadlineExceeded) || d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
		if s, _ := l.Stats(); s.Checks != 0 {
			t.Fatalf("checked anyway: %+v", s)
		}
	})
	t.Run("cancellation ends the wait", func(t *testing.T) {
		// The turn is an hour away: an Acquire that missed the
		// cancellation would wait the hour. Half of it bounds what the
		// call controls, not how soon a busy machine runs the timer.
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.GCRA, Limit: 1, Period: time.Hour})
		l.Check(ratecell.Request{})
		c, cancel := context.WithCancel(ctx)
		time.AfterFunc(20*time.Millisecond, cancel)
		start := time.Now()
		d, err := l.Acquire(c, ratecell.Request{})
		if !errors.Is(err, context.Canceled) || errors.Is(err, ratecell.ErrTimedOut) || d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
		if waited := time.Since(start); waited > d.RetryAfter/2 || d.RetryAfter < 30*time.Minute {
			t.Fatalf("cancellation took %v of a %v wait", waited, d.RetryAfter)
		}
		if _, err := l.Acquire(c, ratecell.Request{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("a done context: %v", err)
		}
		c2, cancel2 := context.WithCancelCause(ctx)
		cause := errors.New("client went away")
		time.AfterFunc(10*time.Millisecond, func() { cancel2(cause) })
		if _, err := l.Acquire(c2, ratecell.Request{}); !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
			t.Fatalf("cause: %v", err)
		}
	})
	t.Run("cost above the limit", func(t *testing.T) {
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.TokenBucket, Limit: 2, Period: time.Second})
		d, err := l.Acquire(ctx, ratecell.Request{Cost: 3})
		if !errors.Is(err, ratecell.ErrCostExceedsLimit) || d.RetryAfter != ratecell.Never {
			t.Fatalf("%+v, %v", d, err)
		}
	})
	t.Run("leaky bucket waits out its queue place", func(t *testing.T) {
		// 100 per second (T = 10 ms), a queue of 5: the fifth leaves 40 ms
		// after the first.
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.LeakyBucket, Limit: 100, Period: time.Second, Burst: 5, Capacity: 10})
		start := time.Now()
		var last ratecell.Decision
		for i := 0; i < 5; i++ {
			var err error
			if last, err = l.Acquire(ctx, ratecell.Request{Key: ratecell.BytesKey([]byte("q"))}); err != nil {
				t.Fatal(err)
			}
		}
		if waited := time.Since(start); waited < 35*time.Millisecond || !last.Allowed {
			t.Fatalf("five places served in %v (%+v)", waited, last)
		}
	})
	t.Run("leaky bucket takes no place it cannot wait for", func(t *testing.T) {
		// T = 10 s, a queue of 10 filled: the next place waits ~100 s,
		// beyond the 30 s deadline (which a busy machine cannot use up
		// before the call decides).
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.LeakyBucket, Limit: 10, Period: 100 * time.Second, Burst: 20})
		for i := 0; i < 10; i++ {
			l.Check(ratecell.Request{})
		}
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		d, err := l.Acquire(c, ratecell.Request{})
		if !errors.Is(err, ratecell.ErrTimedOut) || d.Allowed || d.RetryAfter < 50*time.Second {
			t.Fatalf("%+v, %v", d, err)
		}
		peek, _ := l.Check(ratecell.Request{Peek: true})
		if peek.Wait > 100*time.Second || peek.Remaining < 10 {
			t.Fatalf("the timed-out acquire queued: %+v", peek)
		}
	})
	t.Run("leaky bucket cancelled after admission", func(t *testing.T) {
		// T = 6 s, five places queued: the sixth is admitted with a wait
		// of 30 s. Cancelled, it stops waiting: half the wait bounds what
		// the call controls, not how soon a busy machine runs the timer.
		l := newLimiter(t, ratecell.Config{Algorithm: ratecell.LeakyBucket, Limit: 10, Period: time.Minute, Burst: 20})
		for i := 0; i < 5; i++ {
			l.Check(ratecell.Request{})
		}
		c, cancel := context.WithCancel(ctx)
		time.AfterFunc(20*time.Millisecond, cancel)
		start := time.Now()
		d, err := l.Acquire(c, ratecell.Request{})
		if !errors.Is(err, context.Canceled) || !d.Allowed || d.Wait < 20*time.Second {
			t.Fatalf("%+v, %v", d, err)
		}
		if waited := time.Since(start); waited > d.Wait/2 {
			t.Fatalf("cancellation took %v of a %v wait", waited, d.Wait)
		}
	})
}

func TestClosedLimiterReturnsErrClosed(t *testing.T) {
	l, err := ratecell.New(ratecell.Config{Algorithm: ratecell.GCRA, Limit: 1, Period: time.Second, Capacity: 4})
	if err != nil {
		t.Fatal(err)
	}
	if l.Close() != nil || l.Close() != nil {
		t.Fatal("Close returned an error")
	}
	var nilLimiter *ratecell.Limiter
	for _, lim := range []*ratecell.Limiter{l, nilLimiter} {
		calls := map[string]error{}
		_, calls["Check"] = lim.Check(ratecell.Request{Key: ratecell.Uint64Key(1)})
		_, calls["Check at"] = lim.Check(ratecell.Request{Key: ratecell.Uint64Key(1), At: 1})
		_, calls["Allow"] = lim.Allow(1)
		_, calls["CheckEach"] = lim.CheckEach(ratecell.Request{Key: ratecell.Uint64Key(1), Tier: 1})
		calls["Reset"] = lim.Reset(ratecell.StringKey("k"))
		_, calls["Check bytes"] = lim.Check(ratecell.Request{Key: ratecell.BytesKey([]byte("k"))})
		_, calls["Check empty bytes at"] = lim.Check(ratecell.Request{Key: ratecell.BytesKey(nil), At: 1})
		_, calls["Check string"] = lim.Check(ratecell.Request{Key: ratecell.StringKey("k")})
		calls["CheckBatch"] = lim.CheckBatch(ratecell.Batch{Keys: []uint64{1}}, make([]bool, 1), nil)
		calls["CheckBatch at"] = lim.CheckBatch(ratecell.Batch{Keys: nil, At: 1}, nil, nil)
		_, calls["Acquire"] = lim.Acquire(context.Background(), ratecell.Request{Key: ratecell.Uint64Key(1)})
		_, calls["Acquire bytes"] = lim.Acquire(context.Background(), ratecell.Request{Key: ratecell.BytesKey(nil)})
		calls["Reset number"] = lim.Reset(ratecell.Uint64Key(1))
		calls["ResetBytes"] = lim.Reset(ratecell.BytesKey(nil))
		_, calls["Stats"] = lim.Stats()
		_, calls["Now"] = lim.Now()
		_, calls["Config"] = lim.Config()
		for name, err := range calls {
			if !errors.Is(err, ratecell.ErrClosed) {
				t.Errorf("%s on a closed limiter: %v", name, err)
			}
		}
	}
	if nilLimiter.Close() != nil {
		t.Error("Close on nil")
	}
}

// Many goroutines on one state admit exactly the limit, as some sequential
// order of the same requests would.
func TestConcurrentChecksAdmitExactlyTheLimit(t *testing.T) {
	const goroutines, attempts, limit = 16, 400, 1000
	for _, alg := range ratecell.Algorithms {
		// A 366-day period: nothing refills while the test runs, on the real clock.
		l := newLimiter(t, ratecell.Config{Algorithm: alg, Limit: limit, Period: 366 * 24 * time.Hour})
		var admittedCount atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < attempts; i++ {
					d, err := l.Check(ratecell.Request{})
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admittedCount.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if got := admittedCount.Load(); got != limit {
			t.Fatalf("%v: %d admitted, limit %d", alg, got, limit)
		}
		if s, _ := l.Stats(); s.Allowed != limit || s.Checks != goroutines*attempts {
			t.Fatalf("%v: %+v", alg, s)
		}
	}
}

// The same per key, with goroutines racing on shared keys and on batches.
func TestConcurrentKeysAdmitExactlyTheirLimit(t *testing.T) {
	const goroutines, keys, limit, rounds = 8, 64, 10, 40
	l := newLimiter(t, ratecell.Config{Algorithm: ratecell.SlidingLog, Limit: limit, Period: 366 * 24 * time.Hour, Capacity: 1024})
	var counts [keys]atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([]uint64, keys)
			allowed := make([]bool, keys)
			for r := 0; r < rounds; r++ {
				for i := range batch {
					batch[i] = uint64((i + g + r) % keys)
				}
				if g%2 == 0 {
					if err := l.CheckBatch(ratecell.Batch{Keys: batch}, allowed, nil); err != nil {
						t.Error(err)
						return
					}
				} else {
					for i, k := range batch {
						d, _ := l.Check(ratecell.Request{Key: ratecell.Uint64Key(k)})
						allowed[i] = d.Allowed
					}
				}
				for i, ok := range allowed {
					if ok {
						counts[batch[i]].Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	for k := range counts {
		if got := counts[k].Load(); got != limit {
			t.Fatalf("key %d: %d admitted, limit %d", k, got, limit)
		}
	}
}

// Close racing with calls from other goroutines: every call either runs
// on the live limiter or returns ErrClosed; none reaches freed memory.
func TestCloseRacesWithCalls(t *testing.T) {
	for round := 0; round < 20; round++ {
		l, err := ratecell.New(ratecell.Config{Algorithm: ratecell.TokenBucket, Limit: 100, Period: time.Millisecond, Capacity: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var ok, closed atomic.Int64
		var running atomic.Int64
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				keys := []uint64{1, 2, 3, 4}
				allowed := make([]bool, 4)
				running.Add(1)
				for i := uint64(0); ; i++ {
					var err error
					switch i % 3 {
					case 0:
						_, err = l.Check(ratecell.Request{Key: ratecell.Uint64Key(i)})
					case 1:
						err = l.CheckBatch(ratecell.Batch{Keys: keys}, allowed, nil)
					default:
						_, err = l.Stats()
					}
					if errors.Is(err, ratecell.ErrClosed) {
						closed.Add(1)
						return
					}
					if err != nil {
						t.Error(err)
						return
					}
					ok.Add(1)
				}
			}()
		}
		for running.Load() < 4 || ok.Load() < 4 {
			runtime.Gosched()
		}
		go l.Close()
		l.Close()
		wg.Wait()
		if closed.Load() != 4 || ok.Load() == 0 {
			t.Fatalf("round %d: %d calls ran, %d goroutines saw ErrClosed", round, ok.Load(), closed.Load())
		}
	}
}
