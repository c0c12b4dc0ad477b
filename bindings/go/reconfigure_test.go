package ratecell

import (
	"errors"
	"testing"
	"time"
)

// Reconfigure keeps what was spent, refuses changes with no carry-over by
// name, and leaves the limiter unchanged when it refuses.
func TestReconfigureKeepsTheSpentAndRefusesByName(t *testing.T) {
	for _, capacity := range []uint64{0, 100} {
		minute := Config{Algorithm: FixedWindow, Limit: 10, Period: time.Minute, Capacity: capacity}
		lim, err := NewWith(Options{Limits: []Limit{
			{Config{Algorithm: GCRA, Limit: 10, Period: time.Second, Capacity: capacity}, "per-second"},
			{minute, "per-minute"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if d, err := lim.CheckEach(Request{Key: Uint64Key(7), Cost: 4, At: t0}); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
		wider := minute
		wider.Limit = 14
		second := Config{Algorithm: GCRA, Limit: 20, Period: time.Second, Capacity: capacity}
		if err := lim.Reconfigure([]Config{second, wider}); err != nil {
			t.Fatal(err)
		}
		d, err := lim.CheckEach(Request{Key: Uint64Key(7), Peek: true, At: t0})
		if err != nil || d.Limits[1].Limit != 14 || d.Limits[1].Remaining != 10 || d.Limits[0].Limit != 20 {
			t.Fatalf("capacity %d: the 4 spent stay spent: %+v, %v", capacity, d, err)
		}
		if lim.LimitName(1) != "per-minute" {
			t.Fatal("names are kept")
		}
		hourly := wider
		hourly.Period = time.Hour
		if err := lim.Reconfigure([]Config{second, hourly}); !errors.Is(err, ErrReconfigureRefused) {
			t.Fatalf("a window's period: %v", err)
		}
		if err := lim.Reconfigure([]Config{second}); !errors.Is(err, ErrReconfigureRefused) {
			t.Fatalf("the number of limits: %v", err)
		}
		bad := second
		bad.Limit = 0
		if err := lim.Reconfigure([]Config{bad, wider}); !errors.Is(err, ErrInvalidLimit) {
			t.Fatalf("an invalid limit: %v", err)
		}
		if err := lim.Reconfigure(nil); !errors.Is(err, ErrInvalidLength) {
			t.Fatalf("no limits: %v", err)
		}
		if d, _ := lim.CheckEach(Request{Key: Uint64Key(7), Peek: true, At: t0}); d.Limits[1].Limit != 14 {
			t.Fatalf("a refusal changes nothing: %+v", d)
		}
		lim.Close()
		if err := lim.Reconfigure([]Config{second, wider}); !errors.Is(err, ErrClosed) {
			t.Fatalf("closed: %v", err)
		}
	}
}
