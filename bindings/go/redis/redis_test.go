package ratecellredis

import (
	"context"
	"math/rand"
	"os"
	"testing"
	"time"

	ratecell "github.com/ratecell/ratecell-go"
	"github.com/redis/go-redis/v9"
)

const t0 = uint64(1_700_002_800) * uint64(time.Second)

// client connects to the server scripts/redis-tests.sh starts (with the
// module loaded); without RATECELL_REDIS_ADDR the tests fail, not skip.
func client(t *testing.T) *redis.Client {
	t.Helper()
	addr := os.Getenv("RATECELL_REDIS_ADDR")
	if addr == "" {
		t.Fatal("set RATECELL_REDIS_ADDR (scripts/redis-tests.sh does)")
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSameDecisionsAsTheInProcessLimiter(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	for _, alg := range ratecell.Algorithms {
		cfg := ratecell.Config{Algorithm: alg, Limit: 4, Period: time.Second}
		local, err := ratecell.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		remote := New(c, cfg).WithPrefix("go:")
		rng := rand.New(rand.NewSource(int64(alg)))
		now := t0
		for i := 0; i < 300; i++ {
			if rng.Intn(10) == 0 {
				now -= uint64(rng.Int63n(int64(time.Second)))
			} else {
				now += uint64(rng.Int63n(int64(time.Second / 3)))
			}
			cost := []uint64{0, 1, 1, 2, 5}[rng.Intn(5)]
			want, err := local.Check(ratecell.Request{Cost: cost, Peek: cost == 0, At: now})
			if err != nil {
				t.Fatal(err)
			}
			got, err := remote.Check(ctx, Request{Key: alg.String(), Cost: cost, Peek: cost == 0, At: now})
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("%v step %d (cost %d at %d): redis %+v, in process %+v", alg, i, cost, now, got, want)
			}
		}
		_ = local.Close()
	}
}

func TestServerClockErrorsAndCheckAll(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	l := New(c, ratecell.Config{Algorithm: ratecell.SlidingWindow, Limit: 1, Period: 10 * time.Second})
	if ok, err := l.Allow(ctx, "k"); err != nil || !ok {
		t.Fatalf("first request: %v %v", ok, err)
	}
	d, err := l.Check(ctx, Request{Key: "k", Cost: 1})
	if err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 20*time.Second {
		t.Fatalf("second request: %+v %v", d, err)
	}
	d, err = l.Check(ctx, Request{Key: "other", Cost: 2})
	if err != nil || d.RetryAfter != ratecell.Never {
		t.Fatalf("cost above the limit: %+v %v", d, err)
	}
	bad := New(c, ratecell.Config{Algorithm: ratecell.GCRA, Limit: 0, Period: time.Second})
	_, err = bad.Check(ctx, Request{Key: "k2", Cost: 1})
	if field, ok := IsConfigError(err); !ok || field != "limit" {
		t.Fatalf("limit 0: %v", err)
	}
	perSecond := New(c, ratecell.Config{Algorithm: ratecell.GCRA, Limit: 2, Period: time.Second})
	perMinute := New(c, ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 1, Period: time.Minute})
	items := []Item{{perSecond, "{u}:s", 1}, {perMinute, "{u}:m", 1}}
	ok, ds, err := CheckAll(ctx, c, items, true, t0)
	if err != nil || !ok || len(ds) != 2 {
		t.Fatalf("first CheckAll: %v %v %v", ok, ds, err)
	}
	ok, ds, err = CheckAll(ctx, c, items, true, t0)
	if err != nil || ok || !ds[0].Allowed || ds[1].Allowed {
		t.Fatalf("second CheckAll: %v %+v %v", ok, ds, err)
	}
	d, err = perSecond.Check(ctx, Request{Key: "{u}:s", Peek: true, At: t0})
	if err != nil || d.Remaining != 1 {
		t.Fatalf("the per-second limit was charged once: %+v %v", d, err)
	}
}
