package ratecell

import (
	"errors"
	"testing"
	"time"
)

const t0 = uint64(480000) * 3600 * uint64(time.Second)

// Several limits as one: the tighter decides, each limit reports, the
// denier is named, direct and keyed.
func TestNewMultiTheTighterLimitDecides(t *testing.T) {
	for _, capacity := range []uint64{0, 100} {
		lim, err := NewWith(Options{Limits: []Limit{
			{Config{Algorithm: GCRA, Limit: 10, Period: time.Second, Capacity: capacity}, "per-second"},
			{Config{Algorithm: FixedWindow, Limit: 3, Period: time.Minute, Capacity: capacity}, "per-minute"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		for left := uint64(3); left > 0; left-- {
			d, err := lim.CheckEach(Request{Key: Uint64Key(7), At: t0})
			if err != nil || !d.Allowed || d.Remaining != left-1 || d.DeniedBy != -1 || len(d.Limits) != 2 {
				t.Fatalf("capacity %d: %+v, %v", capacity, d, err)
			}
			if d.Limits[0].Remaining != 7+left-1 {
				t.Fatalf("the GCRA limit's own remaining: %+v", d.Limits[0])
			}
		}
		d, err := lim.CheckEach(Request{Key: Uint64Key(7), At: t0})
		if err != nil || d.Allowed || d.DeniedBy != 1 || lim.LimitName(d.DeniedBy) != "per-minute" {
			t.Fatalf("denial: %+v, %v", d, err)
		}
		if !d.Limits[0].Allowed || d.Limits[0].Remaining != 7 || d.RetryAfter != d.Limits[1].RetryAfter {
			t.Fatalf("the looser limit spent nothing: %+v", d)
		}
		plain, _ := lim.Check(Request{Key: Uint64Key(7), At: t0})
		if plain.Allowed {
			t.Fatal("Check returns the combined decision")
		}
		if err := lim.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := lim.CheckEach(Request{Key: Uint64Key(7)}); !errors.Is(err, ErrClosed) {
			t.Fatalf("after Close: %v", err)
		}
	}
}

func TestNewMultiRefusesBadLists(t *testing.T) {
	gcra := Config{Algorithm: GCRA, Limit: 10, Period: time.Second}
	if _, err := NewWith(Options{Limits: nil}); !errors.Is(err, ErrInvalidLength) {
		t.Fatalf("no limits: %v", err)
	}
	many := make([]Limit, MaxLimits+1)
	for i := range many {
		many[i] = Limit{Config: gcra}
	}
	if _, err := NewWith(Options{Limits: many}); !errors.Is(err, ErrInvalidLength) {
		t.Fatalf("too many: %v", err)
	}
	keyed := gcra
	keyed.Capacity = 5
	if _, err := NewWith(Options{Limits: []Limit{{Config: gcra}, {Config: keyed}}}); !errors.Is(err, ErrInvalidCapacity) {
		t.Fatalf("mismatched capacity: %v", err)
	}
}
