package ratecellredis

// This file owns the adapter that gives ratehttp's middleware limits kept
// in Redis: one RATECELL.CHECK, or one all-or-nothing RATECELL.CHECKALL,
// per request, or a CachedDeny or Leased limiter's own decision. It lives here, not in ratehttp, so that the core Go module
// does not depend on go-redis.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratecell/ratecell-go/ratehttp"
)

// Named is one limit of HTTPLimits: a policy name and a Limiter.
type Named struct {
	Name    string
	Limiter *Limiter
}

// HTTPLimits is named limits kept in Redis, as ratehttp.Middleware takes
// them (it implements ratehttp.Limits):
//
//	limits, _ := ratecellredis.NewHTTPLimits(rdb, []ratecellredis.Named{
//		{Name: "burst", Limiter: ratecellredis.New(rdb, ratecell.Config{Algorithm: ratecell.GCRA, Limit: 10, Period: time.Second})},
//		{Name: "daily", Limiter: ratecellredis.New(rdb, ratecell.Config{Algorithm: ratecell.SlidingWindow, Limit: 10_000, Period: 24 * time.Hour})},
//	})
//	handler := ratehttp.Middleware(limits, ratehttp.Options{})(mux)
//
// One limit is one RATECELL.CHECK on the limiter's key (prefix + key).
// Several are one RATECELL.CHECKALL, admitted and stored only if every
// limit admits, on the keys prefix + "{" + key + "}:" + name, whose hash
// tag puts them in one cluster slot. The request's context bounds the
// call. The limiters' own clients are not used.
//
// A limiter made by NewLimiter in CachedDeny or Leased mode decides each
// request itself instead, with its own client, Options.Timeout and
// Options.Failure (SPEC.md section 8):
//
//	l, _ := ratecellredis.NewLimiter(rdb, cfg, ratecellredis.Options{Mode: ratecellredis.Leased})
//	limits, _ := ratecellredis.NewHTTPLimits(rdb, []ratecellredis.Named{{Name: "api", Limiter: l}})
//
// A remembered denial (CachedDeny) or units in hand (Leased) answer
// without a command; a Redis that does not answer in time is the
// limiter's failure policy's (FailDeny: a 429 whose Retry-After is the
// next attempt; FailLocal: this node's share of the limit), not a 503.
// Such a limiter is the store's only limit: the modes decide each limit
// on its own, so several could not be all-or-nothing.
type HTTPLimits struct {
	client   Client
	limiters []*Limiter
	policies []ratehttp.Policy
	now      func() uint64
	timeout  time.Duration
	// modal is the one limit's limiter when it decides itself (a
	// CachedDeny or Leased limiter of NewLimiter's).
	modal *Limiter
}

// DefaultTimeout bounds each HTTPLimits check: a store that has not
// answered by then is an error, which the middleware answers with 503, or
// by passing the request with Options.FailOpen. Well under a second: a
// stalled Redis must not stall every request behind it.
const DefaultTimeout = 250 * time.Millisecond

// ErrTimeout is wrapped by the error of a check the store did not answer
// within the timeout.
var ErrTimeout = errors.New("ratecell: the Redis store did not answer in time")

// NewHTTPLimits checks the names (ratehttp.CheckPolicies: printable ASCII,
// no two equal; a lone unnamed limit is ratehttp.DefaultName) and the
// limiters (none nil; a CachedDeny or Leased one alone).
func NewHTTPLimits(client Client, limits []Named) (*HTTPLimits, error) {
	if client == nil {
		return nil, fmt.Errorf("ratecell: NewHTTPLimits: client is nil")
	}
	policies := make([]ratehttp.Policy, len(limits))
	limiters := make([]*Limiter, len(limits))
	var modal *Limiter
	for i, n := range limits {
		if n.Limiter == nil {
			return nil, fmt.Errorf("ratecell: NewHTTPLimits: limit %d (%q) has a nil Limiter", i, n.Name)
		}
		if mode := n.Limiter.Mode(); mode != Strict {
			if len(limits) != 1 {
				return nil, fmt.Errorf("ratecell: NewHTTPLimits: limit %d (%q) has mode %v, which decides one limit on its own: "+
					"give it a store of its own (several limits are one all-or-nothing RATECELL.CHECKALL, Strict only)", i, n.Name, mode)
			}
			modal = n.Limiter
		}
		policies[i] = ratehttp.Policy{Name: n.Name, Limit: n.Limiter.limit, Period: n.Limiter.period}
		limiters[i] = n.Limiter
	}
	policies, err := ratehttp.CheckPolicies(policies)
	if err != nil {
		return nil, err
	}
	return &HTTPLimits{client: client, limiters: limiters, policies: policies, timeout: DefaultTimeout, modal: modal}, nil
}

// WithTimeout returns limits whose checks give up after d (0: only the
// request's context bounds them). A CachedDeny or Leased limiter's checks
// are bounded by its own Options.Timeout instead, per command. The check returns at the deadline even
// when the client does not watch its context (go-redis without
// ContextTimeoutEnabled keeps reading until its ReadTimeout): the call
// then finishes in the background and its answer is dropped. Set
// ContextTimeoutEnabled on the client so that it stops reading too.
func (h *HTTPLimits) WithTimeout(d time.Duration) *HTTPLimits {
	c := *h
	c.timeout = d
	return &c
}

// WithClock returns limits that decide at now() (UNIX ns, the module's AT)
// instead of the server's clock: for tests and replays (such states never
// expire). A Leased limiter decides its units in hand at now() and sends
// it to the server only with Options.SendAt.
func (h *HTTPLimits) WithClock(now func() uint64) *HTTPLimits {
	c := *h
	c.now = now
	return &c
}

// PolicyField is the RateLimit-Policy value, the same on every response.
func (h *HTTPLimits) PolicyField() string {
	items := make([]ratehttp.LimitDecision, len(h.policies))
	for i, p := range h.policies {
		items[i] = ratehttp.LimitDecision{Name: p.Name, Limit: p.Limit, Period: p.Period}
	}
	return ratehttp.PolicyField(items)
}

// Check decides one request for key (ratehttp.Limits), within the timeout.
func (h *HTTPLimits) Check(ctx context.Context, key []byte, cost uint64) ([]ratehttp.LimitDecision, error) {
	if h.modal != nil {
		// On the request's goroutine: a check that finds units in hand or
		// a remembered denial never waits, and one that asks Redis waits
		// at most the limiter's timeout.
		return h.checkModal(ctx, key, cost)
	}
	if h.timeout <= 0 {
		return h.check(ctx, key, cost)
	}
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	type answer struct {
		items []ratehttp.LimitDecision
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		items, err := h.check(ctx, key, cost)
		done <- answer{items, err}
	}()
	select {
	case a := <-done:
		return a.items, a.err
	case <-ctx.Done():
		if ctx.Err() == context.DeadlineExceeded {
			return nil, fmt.Errorf("%w (%v)", ErrTimeout, h.timeout)
		}
		return nil, ctx.Err()
	}
}

func (h *HTTPLimits) check(ctx context.Context, key []byte, cost uint64) ([]ratehttp.LimitDecision, error) {
	var nowNs uint64
	if h.now != nil {
		nowNs = h.now()
	}
	items := make([]ratehttp.LimitDecision, len(h.policies))
	if len(h.limiters) == 1 {
		d, err := h.limiters[0].runWith(ctx, h.client, string(key), cost, h.now != nil, nowNs)
		if err != nil {
			return nil, err
		}
		p := h.policies[0]
		items[0] = ratehttp.LimitDecision{Name: p.Name, Limit: p.Limit, Period: p.Period, Decision: d}
		return items, nil
	}
	all := make([]Item, len(h.limiters))
	for i, l := range h.limiters {
		all[i] = Item{Limiter: l, Key: "{" + string(key) + "}:" + h.policies[i].Name, Cost: cost}
	}
	_, decisions, err := CheckAll(ctx, h.client, all, h.now != nil, nowNs)
	if err != nil {
		return nil, err
	}
	if len(decisions) != len(items) {
		return nil, fmt.Errorf("ratecell: %w: %d decisions for %d limits", ErrReply, len(decisions), len(items))
	}
	for i, p := range h.policies {
		items[i] = ratehttp.LimitDecision{Name: p.Name, Limit: p.Limit, Period: p.Period, Decision: decisions[i]}
	}
	return items, nil
}

func (h *HTTPLimits) checkModal(ctx context.Context, key []byte, cost uint64) ([]ratehttp.LimitDecision, error) {
	r := Request{Key: string(key), Cost: cost, Peek: cost == 0}
	if h.now != nil {
		r.At = h.now()
	}
	d, err := h.modal.Check(ctx, r)
	if err != nil {
		return nil, err
	}
	p := h.policies[0]
	return []ratehttp.LimitDecision{{Name: p.Name, Limit: p.Limit, Period: p.Period, Decision: d}}, nil
}
