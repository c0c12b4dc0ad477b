package ratecellredis

import (
	"context"
	"errors"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ratecell "github.com/ratecell/ratecell-go"
	"github.com/redis/go-redis/v9"
)

// A whole second: windows of 1 s start at modeT0 + k s.
const modeT0 = uint64(1_700_000_000) * uint64(time.Second)

var modes = []struct {
	name string
	mode Mode
}{{"strict", Strict}, {"cached_deny", CachedDeny}, {"leased", Leased}}

func mustLimiter(t *testing.T, c Client, cfg ratecell.Config, o Options) *Limiter {
	t.Helper()
	l, err := NewLimiter(c, cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestEachModeAdmitsTheLimitThenDenies(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	for _, m := range modes {
		cfg := ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 5, Period: time.Second}
		l := mustLimiter(t, c, cfg, Options{Mode: m.mode, SendAt: true, Skew: -1, Prefix: m.name + ":"})
		var got []bool
		var last ratecell.Decision
		for i := uint64(0); i < 8; i++ {
			d, err := l.Check(ctx, Request{Key: "k", Cost: 1, At: modeT0 + i*uint64(time.Second)/100})
			if err != nil {
				t.Fatal(m.name, err)
			}
			got = append(got, d.Allowed)
			last = d
		}
		want := []bool{true, true, true, true, true, false, false, false}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: admitted %v, want %v", m.name, got, want)
			}
		}
		if last.Limit != 5 || last.RetryAfter <= 0 || last.RetryAfter > time.Second-70*time.Millisecond {
			t.Fatalf("%s: last decision %+v", m.name, last)
		}
		if d, err := l.Check(ctx, Request{Key: "k", Cost: 1, At: modeT0 + uint64(time.Second)}); err != nil || !d.Allowed {
			t.Fatalf("%s: the next window: %+v %v", m.name, d, err)
		}
		s := l.Stats()
		if s.Commands == 0 || s.Failures != 0 || s.Fallbacks != 0 || (s.Lease != nil) != (m.mode == Leased) {
			t.Fatalf("%s: stats %+v", m.name, s)
		}
	}
}

func TestLeasedNodesNeverExceedTheLimitInAWindow(t *testing.T) {
	ctx := context.Background()
	client(t) // flushes the server
	const limit = 100
	cfg := ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: limit, Period: time.Second}
	var nodes []*Limiter
	for i := 0; i < 3; i++ {
		own := redis.NewClient(&redis.Options{Addr: os.Getenv("RATECELL_REDIS_ADDR")})
		t.Cleanup(func() { _ = own.Close() })
		nodes = append(nodes, mustLimiter(t, own, cfg, Options{
			Mode: Leased, MaxGrant: 10, SendAt: true, Skew: -1, Prefix: "fleet:",
		}))
	}
	rng := rand.New(rand.NewSource(35))
	admitted := map[uint64]int{}
	now := modeT0
	for i := 0; i < 3000; i++ {
		now += uint64(rng.Int63n(int64(4 * time.Millisecond)))
		d, err := nodes[rng.Intn(len(nodes))].Check(ctx, Request{Key: "shared", Cost: 1, At: now})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted[(now-modeT0)/uint64(time.Second)]++
		}
	}
	full := 0
	for w, n := range admitted {
		if n > limit {
			t.Fatalf("window %d: %d admitted, limit %d", w, n, limit)
		}
		if n >= limit*6/10 {
			full++
		}
	}
	if len(admitted) < 4 || full < 3 {
		t.Fatalf("the limit was hardly used: %v", admitted)
	}
}

// calls is how many times the server ran command since CONFIG RESETSTAT.
func calls(t *testing.T, c *redis.Client, command string) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":calls=")
		if ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}

func TestCachedDenySendsNothingForADeniedKeyUntilRetryAfter(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	cfg := ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 2, Period: 10 * time.Second}
	l := mustLimiter(t, c, cfg, Options{Mode: CachedDeny})
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	check := func(key string, at uint64) ratecell.Decision {
		d, err := l.Check(ctx, Request{Key: key, Cost: 1, At: at})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if !check("k", modeT0).Allowed || !check("k", modeT0+1).Allowed || check("k", modeT0+2).Allowed {
		t.Fatal("two admitted, then denied")
	}
	if n := calls(t, c, "ratecell.check"); n != 3 {
		t.Fatalf("%d commands, want 3", n)
	}
	for i := uint64(0); i < 50; i++ {
		at := modeT0 + 3 + i*uint64(time.Second)/10
		d := check("k", at)
		if d.Allowed || d.RetryAfter != time.Duration(modeT0+10*uint64(time.Second)-at) {
			t.Fatalf("remembered denial %+v", d)
		}
	}
	if n := calls(t, c, "ratecell.check"); n != 3 {
		t.Fatalf("%d commands: a remembered denial sent one", n)
	}
	if !check("k", modeT0+10*uint64(time.Second)).Allowed {
		t.Fatal("at retry_after Redis admits again")
	}
	if n := calls(t, c, "ratecell.check"); n != 4 {
		t.Fatalf("%d commands, want 4", n)
	}
}

func TestBadSettingsAreNamed(t *testing.T) {
	c := client(t)
	cases := []struct {
		cfg    ratecell.Config
		o      Options
		status ratecell.Status
	}{
		{ratecell.Config{Algorithm: ratecell.SlidingLog, Limit: 5, Period: time.Second}, Options{Mode: Leased}, ratecell.StatusNotLeasable},
		{ratecell.Config{Algorithm: ratecell.GCRA, Limit: 5, Period: time.Second}, Options{Mode: Leased, MaxGrant: 6}, ratecell.StatusInvalidMaxGrant},
		{ratecell.Config{Algorithm: ratecell.GCRA, Limit: 5, Period: time.Second}, Options{Mode: Leased, Horizon: 2 * time.Second}, ratecell.StatusInvalidHorizon},
		{ratecell.Config{Algorithm: ratecell.GCRA, Limit: 5, Period: time.Second}, Options{Mode: Leased, Skew: time.Second}, ratecell.StatusInvalidSkew},
		{ratecell.Config{Algorithm: ratecell.GCRA, Limit: 5, Period: time.Second}, Options{Failure: 9}, ratecell.StatusInvalidFailure},
	}
	for _, tc := range cases {
		_, err := NewLimiter(c, tc.cfg, tc.o)
		var e *ratecell.Error
		if !errors.As(err, &e) || e.Status != tc.status {
			t.Fatalf("%+v: %v, want %s", tc.o, err, tc.status.Name())
		}
	}
}

func TestAPausedServerIsThePolicysThenTheGlobalLimitIsBack(t *testing.T) {
	ctx := context.Background()
	const timeout = 50 * time.Millisecond
	for _, m := range modes {
		c, proc := pausable(t)
		// A day's window, aligned to midnight UTC: the rest of it is longer
		// than any retry the policy gives (a second at most) but in the
		// day's last second. An hour's was shorter than the minute this
		// test took for Redis's retry in the last minute of every hour.
		cfg := ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 2, Period: 24 * time.Hour}
		deny := mustLimiter(t, c, cfg, Options{Mode: m.mode, Timeout: timeout})
		local := mustLimiter(t, c, cfg, Options{Mode: m.mode, Timeout: timeout, Failure: ratecell.FailLocal})
		for i := 0; i < 2; i++ {
			if ok, err := deny.Allow(ctx, "spent"); err != nil || !ok {
				t.Fatalf("%s: %v %v", m.name, ok, err)
			}
		}
		if err := proc.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		for _, lc := range []struct {
			l     *Limiter
			admit bool
		}{{deny, false}, {local, true}} {
			// Ended by the limiter's timeout, or else by the client's
			// minute (pausable): half of that bounds what the limiter
			// controls, however busy the machine.
			start := time.Now()
			d, err := lc.l.Check(ctx, Request{Key: "fresh", Cost: 1})
			took := time.Since(start)
			if err != nil || d.Allowed != lc.admit || took > clientTimeout/2 {
				t.Fatalf("%s: paused: %+v %v in %v", m.name, d, err, took)
			}
			if lc.l.Stats().Fallbacks == 0 {
				t.Fatalf("%s: no fallback counted", m.name)
			}
		}
		if err := proc.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		// Within a few backoff steps Redis decides again: a check the
		// policy did not decide, denied because the global limit is spent.
		for _, l := range []*Limiter{deny, local} {
			deadline := time.Now().Add(5 * time.Second)
			for {
				before := l.Stats().Fallbacks
				d, err := l.Check(ctx, Request{Key: "spent", Cost: 1})
				if err != nil {
					t.Fatal(err)
				}
				if l.Stats().Fallbacks == before {
					if d.Allowed || d.RetryAfter <= time.Second {
						t.Fatalf("%s: back on Redis: %+v", m.name, d)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: Redis never came back", m.name)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
}

// A leased check that finds units, against a local ratecell.Limiter check
// of the same key (go test -run ^$ -bench 'Check$' with the server of
// TestEachModeAdmitsTheLimitThenDenies): both limits are never reached.
func BenchmarkLeasedCheck(b *testing.B) {
	addr := os.Getenv("RATECELL_REDIS_ADDR")
	if addr == "" {
		b.Fatal("set RATECELL_REDIS_ADDR")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	cfg := ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 1<<32 - 1, Period: time.Hour}
	l, err := NewLimiter(rdb, cfg, Options{Mode: Leased, MaxGrant: 1_000_000, Prefix: "bench:"})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for i := 0; i < 1000; i++ {
		if d, err := l.Check(ctx, Request{Key: "user:1", Cost: 1}); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := l.Check(ctx, Request{Key: "user:1", Cost: 1}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLocalCheck(b *testing.B) {
	cfg := ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 1<<32 - 1, Period: time.Hour, Capacity: 1024}
	l, err := ratecell.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	r := ratecell.Request{Key: ratecell.StringKey("user:1")}
	for i := 0; i < b.N; i++ {
		if _, err := l.Check(r); err != nil {
			b.Fatal(err)
		}
	}
}
