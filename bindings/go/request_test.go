package ratecell_test

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/ratecell/ratecell-go"
)

// The one request shape: the zero Request is cost 1 for key 0, now, tier
// 0; Peek is the only cost-0 request; the empty byte key is a key of its
// own; the number k is its 8 little-endian bytes.
func TestRequestShape(t *testing.T) {
	lim := newLimiter(t, ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 3, Period: time.Hour, Capacity: 16})
	const t0 = 1_700_000_000_000_000_000 // on an hour boundary
	check := func(r ratecell.Request) ratecell.Decision {
		t.Helper()
		d, err := lim.Check(r)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := check(ratecell.Request{At: t0}); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("the zero request is cost 1 for key 0: %+v", d)
	}
	if d := check(ratecell.Request{At: t0, Peek: true, Cost: 5}); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("a peek takes nothing: %+v", d)
	}
	le0 := binary.LittleEndian.AppendUint64(nil, 0)
	if d := check(ratecell.Request{Key: ratecell.BytesKey(le0), At: t0, Cost: 2}); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("key 0 is its 8 little-endian bytes: %+v", d)
	}
	for _, k := range []ratecell.Key{ratecell.BytesKey(nil), ratecell.BytesKey([]byte{}), ratecell.StringKey("")} {
		if d := check(ratecell.Request{Key: k, At: t0, Peek: true}); d.Remaining != 3 {
			t.Fatalf("the empty key is not key 0: %+v", d)
		}
	}
	check(ratecell.Request{Key: ratecell.StringKey(""), At: t0})
	if d := check(ratecell.Request{Key: ratecell.BytesKey(nil), At: t0, Peek: true}); d.Remaining != 2 {
		t.Fatalf("every empty key is the one empty key: %+v", d)
	}
	if err := lim.Reset(ratecell.Key{}); err != nil {
		t.Fatal(err)
	}
	if d := check(ratecell.Request{Key: ratecell.Uint64Key(0), At: t0, Peek: true}); d.Remaining != 3 {
		t.Fatalf("the zero Key is key 0: %+v", d)
	}

	// Tiers the limiter does not have: nothing checked.
	for _, tier := range []int{1, -1, 1 << 40} {
		if _, err := lim.Check(ratecell.Request{Tier: tier}); !errors.Is(err, ratecell.ErrInvalidTier) {
			t.Fatalf("tier %d: %v", tier, err)
		}
		if _, err := lim.CheckEach(ratecell.Request{Tier: tier}); !errors.Is(err, ratecell.ErrInvalidTier) {
			t.Fatalf("tier %d: %v", tier, err)
		}
	}
	allowed := make([]bool, 2)
	if err := lim.CheckBatch(ratecell.Batch{Keys: []uint64{1, 2}, Tiers: []uint32{0, 1}}, allowed, nil); !errors.Is(err, ratecell.ErrInvalidTier) {
		t.Fatalf("batch tier: %v", err)
	}
	if err := lim.CheckBatch(ratecell.Batch{Keys: []uint64{1, 2}, Tiers: []uint32{0}}, allowed, nil); !errors.Is(err, ratecell.ErrInvalidLength) {
		t.Fatalf("batch tiers of another length: %v", err)
	}
	if s, _ := lim.Stats(); s.Checks != 9 { // the nine above
		t.Fatalf("refused requests are not checks: %+v", s)
	}
}

// NewWith refuses what no limiter is.
func TestOptions(t *testing.T) {
	cfg := ratecell.Config{Algorithm: ratecell.GCRA, Limit: 5, Period: time.Second, Capacity: 8}
	for name, o := range map[string]ratecell.Options{
		"nothing":          {},
		"limits and tiers": {Limits: []ratecell.Limit{{Config: cfg}}, Tiers: [][]ratecell.Config{{cfg}}},
		"unequal tiers":    {Tiers: [][]ratecell.Config{{cfg, cfg}, {cfg}}},
		"too many limits":  {Limits: make([]ratecell.Limit, ratecell.MaxLimits+1)},
	} {
		if _, err := ratecell.NewWith(o); !errors.Is(err, ratecell.ErrInvalidLength) {
			t.Errorf("%s: %v", name, err)
		}
	}
	lim, err := ratecell.NewWith(ratecell.Options{Limits: []ratecell.Limit{{Config: cfg, Name: "api"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	if lim.LimitName(0) != "api" || lim.Tiers() != 1 {
		t.Fatalf("one named limit: %q, %d tiers", lim.LimitName(0), lim.Tiers())
	}
}

// Every kind of request is allocation-free, byte keys included.
func TestRequestsDoNotAllocate(t *testing.T) {
	lim := newLimiter(t, ratecell.Config{Algorithm: ratecell.GCRA, Limit: 1_000_000_000, Period: time.Second, Capacity: 64})
	key := []byte("user:42")
	keys, allowed := []uint64{1, 2, 3}, make([]bool, 3)
	for name, f := range map[string]func(){
		"number": func() { _, _ = lim.Check(ratecell.Request{Key: ratecell.Uint64Key(7)}) },
		"bytes":  func() { _, _ = lim.Check(ratecell.Request{Key: ratecell.BytesKey(key), Cost: 2, Tier: 0}) },
		"string": func() { _, _ = lim.Check(ratecell.Request{Key: ratecell.StringKey("user:43"), At: 1}) },
		"allow":  func() { _, _ = lim.Allow(7) },
		"batch":  func() { _ = lim.CheckBatch(ratecell.Batch{Keys: keys}, allowed, nil) },
		"reset":  func() { _ = lim.Reset(ratecell.BytesKey(key)) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations per call", name, n)
		}
	}
}
