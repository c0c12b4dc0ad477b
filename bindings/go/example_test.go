package ratecell_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratecell/ratecell-go"
)

// Per-user limits: 5 requests per second each, for up to 100 000 users.
// Explicit times (CheckAt) make the output deterministic; Check reads the
// limiter's clock instead.
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
		d, _ := lim.CheckAt(42, 1, now)
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

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := lim.Acquire(ctx, 0, 1)
	fmt.Println("first:", err)
	d, err := lim.Acquire(ctx, 0, 1) // the next token is an hour away
	fmt.Println("second:", errors.Is(err, ratecell.ErrTimedOut), errors.Is(err, context.DeadlineExceeded), d.RetryAfter > time.Minute)
	// Output:
	// first: <nil>
	// second: true true true
}

// A batch decides many keys in one call into the library.
func ExampleLimiter_CheckBatchAt() {
	lim, _ := ratecell.New(ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 2, Period: time.Minute, Capacity: 1000})
	defer lim.Close()

	keys := []uint64{7, 7, 7, 8}
	allowed := make([]bool, len(keys))
	if err := lim.CheckBatchAt(keys, nil, 1_700_000_000_000_000_000, allowed, nil); err != nil {
		panic(err)
	}
	fmt.Println(allowed)
	// Output:
	// [true true false true]
}
