package ratecell_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratecell/ratecell-go"
)

// Per-user limits: 5 requests per second each, for up to 100 000 users.
// Explicit times (Request.At) make the output deterministic; a request
// without one is decided at the limiter's clock.
func Example() {
	lim, err := ratecell.New(ratecell.Config{
		Algorithm: ratecell.SlidingWindow,
		Limit:     5,
		Period:    time.Second,
		Capacity:  100_000,
	})
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	now := uint64(1_700_000_000_000_000_000) // UNIX ns, on a second boundary
	for i := 0; i < 7; i++ {
		d, _ := lim.Check(ratecell.Request{Key: ratecell.Uint64Key(42), At: now})
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// true 4 0s
	// true 3 0s
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 1.2s
	// false 0 1.2s
}

// Errors name the configuration field at fault.
func ExampleNew_invalid() {
	_, err := ratecell.New(ratecell.Config{Algorithm: ratecell.GCRA, Limit: 0, Period: time.Second})
	fmt.Println(err)
	fmt.Println(errors.Is(err, ratecell.ErrInvalidLimit))
	var e *ratecell.Error
	if errors.As(err, &e) {
		fmt.Println(e.Status.Name())
	}
	// Output:
	// ratecell: new: invalid limit: outside 1..=2^32-1, above period_ns for gcra/leaky_bucket, or too large for a keyed sliding_window with this period (the key's fingerprint needs 32 bits)
	// true
	// INVALID_LIMIT
}

// Acquire waits for admission, up to the context's deadline.
func ExampleLimiter_Acquire() {
	lim, _ := ratecell.New(ratecell.Config{Algorithm: ratecell.TokenBucket, Limit: 1, Period: time.Hour})
	defer lim.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := lim.Acquire(ctx, ratecell.Request{})
	fmt.Println("first:", err)
	d, err := lim.Acquire(ctx, ratecell.Request{}) // the next token is an hour away
	fmt.Println("second:", errors.Is(err, ratecell.ErrTimedOut), errors.Is(err, context.DeadlineExceeded), d.RetryAfter > time.Minute)
	// Output:
	// first: <nil>
	// second: true true true
}

// A batch decides many keys in one call into the library.
func ExampleLimiter_CheckBatch() {
	lim, _ := ratecell.New(ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 2, Period: time.Minute, Capacity: 1000})
	defer lim.Close()

	keys := []uint64{7, 7, 7, 8}
	allowed := make([]bool, len(keys))
	if err := lim.CheckBatch(ratecell.Batch{Keys: keys, At: 1_700_000_000_000_000_000}, allowed, nil); err != nil {
		panic(err)
	}
	fmt.Println(allowed)
	// Output:
	// [true true false true]
}

// One request shape: a key (a number, bytes or a string), and only what
// differs from cost 1, now, tier 0.
func ExampleRequest() {
	lim, _ := ratecell.NewWith(ratecell.Options{Tiers: [][]ratecell.Config{
		{{Algorithm: ratecell.FixedWindow, Limit: 2, Period: time.Minute, Capacity: 1000}},  // free
		{{Algorithm: ratecell.FixedWindow, Limit: 20, Period: time.Minute, Capacity: 1000}}, // paid
	}})
	defer lim.Close()

	const t0 = 1_700_000_000_000_000_000
	free, _ := lim.Check(ratecell.Request{Key: ratecell.StringKey("alice"), Cost: 2, At: t0})
	paid, _ := lim.Check(ratecell.Request{Key: ratecell.StringKey("bob"), Cost: 2, At: t0, Tier: 1})
	peek, _ := lim.Check(ratecell.Request{Key: ratecell.StringKey("alice"), Peek: true, At: t0})
	fmt.Println(free.Remaining, paid.Remaining, peek.Allowed)
	// Output:
	// 0 18 false
}
