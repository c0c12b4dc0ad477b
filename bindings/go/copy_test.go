package ratecell

// Issue 20, item 7: a Limiter copied by value (cp := *lim) must not be a
// second owner of the handle, and a zero-value Limiter is a closed one.

import (
	"errors"
	"runtime"
	"testing"
	"time"
)

func TestACopiedLimiterSharesOneHandle(t *testing.T) {
	lim, err := New(Config{Algorithm: GCRA, Limit: 2, Period: time.Hour, Capacity: 16})
	if err != nil {
		t.Fatal(err)
	}
	cp := *lim // a copy by value, as a careless caller would make
	if d, err := cp.Check(Request{Key: Uint64Key(1), At: 1}); err != nil || !d.Allowed {
		t.Fatalf("the copy checks the same limiter: %+v, %v", d, err)
	}
	if d, _ := lim.Check(Request{Key: Uint64Key(1), At: 1}); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("the original sees the copy's request: %+v", d)
	}
	if err := cp.Close(); err != nil {
		t.Fatal(err)
	}
	// Closing the copy closed the one handle: the original says so, and
	// does not touch freed memory.
	if _, err := lim.Check(Request{Key: Uint64Key(1), At: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after the copy's Close: %v, want ErrClosed", err)
	}
	if err := lim.Close(); err != nil {
		t.Fatal(err)
	}
	// Nothing is freed twice when both are collected.
	runtime.GC()
	runtime.GC()
}

func TestTheOriginalsCleanupDoesNotFreeUnderACopy(t *testing.T) {
	lim, err := New(Config{Algorithm: GCRA, Limit: 1000, Period: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cp := *lim // a copy by value
	lim = nil
	for range 5 {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	// The handle lives while a copy does.
	if _, err := cp.Check(Request{Key: Uint64Key(1), At: 1}); err != nil {
		t.Fatalf("the copy after the original was collected: %v", err)
	}
	cp.Close()
}

func TestAZeroValueLimiterIsClosed(t *testing.T) {
	var zero Limiter
	if _, err := zero.Check(Request{Key: Uint64Key(1)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Check on Limiter{}: %v, want ErrClosed", err)
	}
	if _, err := zero.Acquire(t.Context(), Request{Key: Uint64Key(1)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire on Limiter{}: %v, want ErrClosed", err)
	}
	if _, err := zero.Stats(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Stats on Limiter{}: %v, want ErrClosed", err)
	}
	if err := zero.Close(); err != nil {
		t.Fatalf("Close on Limiter{}: %v", err)
	}
}
