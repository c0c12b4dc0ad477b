// Package ratecellredis is a client of the ratecell Redis module
// (bindings/redis): the same decisions as the in-process ratecell.Limiter,
// made inside Redis, so one limit holds across every process and machine
// that shares the server or cluster.
//
// It lives in its own Go module so that the core binding
// (github.com/ratecell/ratecell-go) depends on nothing; this one adds
// go-redis and returns the core binding's Decision.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	limiter := ratecellredis.New(rdb, ratecell.Config{Algorithm: ratecell.GCRA, Limit: 100, Period: time.Second})
//	d, err := limiter.CheckString(ctx, "user:42", 1)
//	if err == nil && !d.Allowed {
//		// retry after d.RetryAfter
//	}
package ratecellredis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	ratecell "github.com/ratecell/ratecell-go"
	"github.com/redis/go-redis/v9"
)

// Client is what the limiter needs of a go-redis client: *redis.Client,
// *redis.ClusterClient, *redis.Ring and redis.UniversalClient all have it.
type Client interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// Limiter is one limit kept per key in Redis. It holds no state of its own
// and is safe for concurrent use, as the go-redis client is.
type Limiter struct {
	client Client
	args   []any
	prefix string
	limit  uint64
	period time.Duration
	// m is a limiter of NewLimiter's: its mode, timeout, failure policy.
	m *modal
}

// New makes a limiter from the fields of cfg that shape a limit
// (Algorithm, Limit, Period, Burst, SubWindows; 0 means the default, as
// for ratecell.New). Capacity, Overflow and Clock do not apply: Redis holds
// one state per key and decides on the server's clock. The server checks
// the configuration: a bad field is an error on the first call.
func New(client Client, cfg ratecell.Config) *Limiter {
	args := []any{cfg.Algorithm.String(), cfg.Limit, fmt.Sprintf("%dns", cfg.Period.Nanoseconds())}
	if cfg.Burst != 0 {
		args = append(args, "BURST", cfg.Burst)
	}
	if cfg.SubWindows != 0 {
		args = append(args, "SUBWINDOWS", cfg.SubWindows)
	}
	return &Limiter{client: client, args: args, limit: cfg.Limit, period: cfg.Period}
}

// WithPrefix returns a limiter that prepends prefix to every key. For a
// limiter of New's only: NewLimiter takes Options.Prefix.
func (l *Limiter) WithPrefix(prefix string) *Limiter {
	c := *l
	c.prefix = prefix
	return &c
}

func (l *Limiter) command(key string, cost uint64, at bool, nowNs uint64) []any {
	cmd := make([]any, 0, 10+len(l.args))
	cmd = append(cmd, l.prefix+key)
	cmd = append(cmd, l.args...)
	cmd = append(cmd, "COST", cost)
	if at {
		cmd = append(cmd, "AT", nowNs)
	}
	return cmd
}

func (l *Limiter) run(ctx context.Context, key string, cost uint64, at bool, nowNs uint64) (ratecell.Decision, error) {
	m := l.m
	if m == nil {
		return l.runWith(ctx, l.client, key, cost, at, nowNs)
	}
	if m.mode == Leased {
		// A leased check that finds units is decided in this frame, the
		// one its Decision is returned from (ratecell.Leases.Check is
		// inlined, so the library writes it here): returned through one
		// more call, Go copies it through memory first, and that copy's
		// loads across the smaller stores just made wait for them
		// (ratecell.Leases.check). Everything else is leased's.
		step, d, g, err := m.leases.Check(request(key, cost, at, nowNs))
		if step == ratecell.StepDecided || err != nil {
			return d, err
		}
		return l.leased(ctx, key, cost, at, nowNs, step, &d, g)
	}
	return l.decide(ctx, key, cost, at, nowNs)
}

func (l *Limiter) runWith(ctx context.Context, client Client, key string, cost uint64, at bool, nowNs uint64) (ratecell.Decision, error) {
	args := append([]any{"RATECELL.CHECK"}, l.command(key, cost, at, nowNs)...)
	reply, err := client.Do(ctx, args...).Int64Slice()
	if err != nil {
		return ratecell.Decision{}, fmt.Errorf("ratecell: RATECELL.CHECK %q: %w", key, err)
	}
	return decision(reply)
}

// ErrReply is wrapped by errors for a reply of an unexpected shape.
var ErrReply = errors.New("unexpected reply")

func decision(r []int64) (ratecell.Decision, error) {
	if len(r) != 6 {
		return ratecell.Decision{}, fmt.Errorf("ratecell: %w: %v", ErrReply, r)
	}
	d := ratecell.Decision{
		Allowed:    r[0] == 1,
		Limit:      uint64(r[1]),
		Remaining:  uint64(r[2]),
		RetryAfter: time.Duration(r[3]),
		ResetAfter: time.Duration(r[4]),
		Wait:       time.Duration(r[5]),
	}
	if r[3] == -1 {
		d.RetryAfter = ratecell.Never
	}
	return d, nil
}

// Request is one check of a limit kept in Redis: the key (a Redis key's
// text, after the limiter's prefix), its cost and its time, as
// ratecell.Request is for a limiter in process.
type Request struct {
	// Key is the key's text.
	Key string
	// Cost is the units asked for; 0 means 1. Set Peek for a request of
	// cost 0.
	Cost uint64
	// Peek asks without taking anything: whether a cost-1 request would be
	// admitted. Nothing is stored.
	Peek bool
	// At is the request's time in UNIX ns from the caller's clock; 0 means
	// now (the server's clock for a strict check, the node's for a leased
	// one). Strict and cached_deny checks send it as AT (the state is then
	// kept without expiry); a leased check is decided at it locally, and
	// sends it only with Options.SendAt.
	At uint64
}

// cost is the cost the module is asked for.
func (r *Request) cost() uint64 {
	switch {
	case r.Peek:
		return 0
	case r.Cost == 0:
		return 1
	}
	return r.Cost
}

// Check decides r and, unless it is a peek or denied, stores the result in
// Redis (strict), or spends it from this node's grants (leased).
func (l *Limiter) Check(ctx context.Context, r Request) (ratecell.Decision, error) {
	return l.run(ctx, r.Key, r.cost(), r.At != 0, r.At)
}

// Allow tells whether a cost-1 request for key is admitted now.
func (l *Limiter) Allow(ctx context.Context, key string) (bool, error) {
	d, err := l.run(ctx, key, 1, false, 0)
	return d.Allowed, err
}

// Item is one limit of a CheckAll: a limiter, a key and a cost.
type Item struct {
	Limiter *Limiter
	Key     string
	Cost    uint64
}

// CheckAll checks several limits as one request (RATECELL.CHECKALL):
// admitted, and stored, only if every limit admits. It returns the overall
// answer and one decision per item (when not admitted, the items that
// would have admitted report a peek at their unchanged state). In a
// cluster the keys must share a slot: use a hash tag ("{user:42}:minute").
// at false means the server's clock.
func CheckAll(ctx context.Context, client Client, items []Item, at bool, nowNs uint64) (bool, []ratecell.Decision, error) {
	args := []any{"RATECELL.CHECKALL"}
	if at {
		args = append(args, "AT", nowNs)
	}
	for _, it := range items {
		args = append(args, "LIMIT")
		args = append(args, it.Limiter.command(it.Key, it.Cost, false, 0)...)
	}
	reply, err := client.Do(ctx, args...).Slice()
	if err != nil {
		return false, nil, fmt.Errorf("ratecell: RATECELL.CHECKALL: %w", err)
	}
	if len(reply) != len(items)+1 {
		return false, nil, fmt.Errorf("ratecell: %w: %v", ErrReply, reply)
	}
	ok, _ := reply[0].(int64)
	out := make([]ratecell.Decision, 0, len(items))
	for _, r := range reply[1:] {
		raw, isSlice := r.([]any)
		ints := make([]int64, 0, 6)
		for _, v := range raw {
			n, isInt := v.(int64)
			if !isInt {
				isSlice = false
			}
			ints = append(ints, n)
		}
		if !isSlice {
			return false, nil, fmt.Errorf("ratecell: %w: %v", ErrReply, r)
		}
		d, err := decision(ints)
		if err != nil {
			return false, nil, err
		}
		out = append(out, d)
	}
	return ok == 1, out, nil
}

// IsConfigError tells whether err is the module refusing a configuration
// field; field is the argument it names ("limit", "period", "BURST",
// "SUBWINDOWS", "algorithm").
func IsConfigError(err error) (field string, ok bool) {
	if err == nil {
		return "", false
	}
	msg := err.Error()
	for _, f := range []string{"limit", "period", "BURST", "SUBWINDOWS", "algorithm"} {
		if strings.Contains(msg, "ERR "+f+" ") {
			return f, true
		}
	}
	return "", false
}
