package ratecell

// This file owns the blocking call. It never blocks inside the library
// (ratecell_acquire would hold the goroutine's thread in C, deaf to the
// context): it loops on non-blocking checks in Go and sleeps on a timer that
// the context can interrupt at once.

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Acquire waits until r is admitted and returns the admitting decision,
// on the limiter's clock (r.At is not used). For the leaky bucket it then also waits out the
// decision's Wait (its turn in the queue), so the caller may act as soon as
// Acquire returns. A limiter of capacity 0 ignores the key; a tier the
// limiter does not have gives ErrInvalidTier at once.
//
// Between checks it sleeps for the decision's RetryAfter, never spinning.
// It gives up:
//
//   - at once, when ctx has a deadline that the next possible admission (or
//     a leaky bucket's queue place) would miss: an error matching both
//     ErrTimedOut and context.DeadlineExceeded, with the last denied
//     decision, and nothing taken from the limit;
//   - at once, when no wait can admit cost (RetryAfter == Never):
//     ErrCostExceedsLimit, with that decision;
//   - as soon as ctx is done while waiting to be admitted: an error wrapping
//     ctx.Err() (and ErrTimedOut for a deadline), with the last denied
//     decision, and nothing taken;
//   - if ctx is done while a leaky bucket request waits out its Wait, the
//     same error, but with the admitting decision (Allowed is true): the
//     request's place in the queue was taken and stays counted against the
//     limit; only the caller's wait was abandoned. With a context deadline
//     this happens only when other goroutines took places between
//     Acquire's look at the queue and its own check.
//
// Whenever err is not nil the caller must not act on the request.
//
// For the leaky bucket under a context with a deadline, each attempt first
// peeks (a cost-0 check, counted in Stats) so as not to take a queue place
// it could not wait for.
func (l *Limiter) Acquire(ctx context.Context, r Request) (Decision, error) {
	cost := uint64(r.cost())
	r.At = 0 // the limiter's clock: waiting needs the time to pass
	return l.acquire(ctx, "acquire", cost, func(c uint64) (Decision, error) {
		req := r
		req.Cost, req.Peek = c, c == 0
		return l.Check(req)
	})
}

func (l *Limiter) acquire(ctx context.Context, op string, cost uint64, check func(uint64) (Decision, error)) (Decision, error) {
	if l == nil || l.core == nil {
		return Decision{}, ErrClosed
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	// sleep reports whether d passed before ctx was done.
	sleep := func(d time.Duration) bool {
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d) // Go 1.23+ timers: no stale value to drain
		}
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		}
	}
	var last Decision
	for {
		if ctx.Err() != nil {
			return last, contextError(op, ctx)
		}
		deadline, bounded := ctx.Deadline()
		if l.core.leaky && bounded && cost > 0 {
			// The queue drains exactly as fast as the deadline nears, so a
			// place whose wait exceeds the time left will never fit it.
			peek, err := check(0)
			if err != nil {
				return last, err
			}
			if left := time.Until(deadline); peek.Allowed && peek.Wait > left {
				peek.Allowed = false
				peek.RetryAfter = peek.Wait - max(left, 0)
				peek.Wait = 0
				return peek, timedOut(op)
			}
		}
		d, err := check(cost)
		if err != nil {
			return last, err
		}
		last = d
		if d.Allowed {
			if d.Wait > 0 && !sleep(d.Wait) {
				return d, contextError(op, ctx)
			}
			return d, nil
		}
		if d.RetryAfter == Never {
			return d, &Error{Op: op, Status: StatusCostExceedsLimit}
		}
		if bounded && d.RetryAfter > time.Until(deadline) {
			return d, timedOut(op)
		}
		if !sleep(d.RetryAfter) {
			return d, contextError(op, ctx)
		}
	}
}

func timedOut(op string) error {
	return &Error{Op: op, Status: StatusTimedOut, Err: context.DeadlineExceeded}
}

// contextError says why ctx ended the wait: a deadline is a time-out
// (ErrTimedOut and context.DeadlineExceeded); a cancellation wraps
// context.Canceled and the cancellation's cause, if it has its own.
func contextError(op string, ctx context.Context) error {
	err := ctx.Err()
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Op: op, Status: StatusTimedOut, Err: err}
	}
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("ratecell: %s: %w (%w)", op, err, cause)
	}
	return fmt.Errorf("ratecell: %s: %w", op, err)
}
