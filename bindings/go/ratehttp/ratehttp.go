// Package ratehttp is net/http middleware that rate-limits requests with
// ratecell and sends the response fields of
// draft-ietf-httpapi-ratelimit-headers-11 (RateLimit-Policy, RateLimit) and,
// on refusal, 429 with Retry-After and an application/problem+json body of
// the draft's quota-exceeded type.
//
//	limiter, _ := ratecell.New(ratecell.Config{Algorithm: ratecell.SlidingWindow, Limit: 100, Period: time.Minute,
//		Capacity: 100_000, Overflow: ratecell.OverflowEvict})
//	limits, _ := ratehttp.FromLimiter(limiter)
//	http.ListenAndServe(":8080", ratehttp.Middleware(limits, ratehttp.Options{})(mux))
//
// Build keyed limiters for the middleware with OverflowEvict, as above:
// the middleware's keys come from clients, who can make up new ones at
// will, and a table full of a flood's states then refuses every new client
// under the library's default OverflowDeny (and stops limiting them under
// OverflowAllow). OverflowEvict gives each new key the place of the state
// nearest to fresh instead (SPEC §5 bounds what that costs).
//
// The middleware asks a Limits once per request for every limit's decision.
// FromLimiter and Single adapt one limiter (anything with Check(ratecell.Request): the
// in-process Limiter, a Redis-backed one); FromMulti and Multi adapt a
// multi-limit limiter (ratecell.NewWith of several limits), one named item per limit. The
// Redis module's adapter is in github.com/ratecell/ratecell-go/redis.
package ratehttp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ratecell "github.com/ratecell/ratecell-go"
)

// Limits decides one request against every limit at once and returns one
// LimitDecision per limit (never none). The request is admitted when every
// item is Allowed. An implementation must decide all limits as one step:
// checking independent limiters one after another would leave the first
// charged when the second refuses. ctx is the request's context (a remote
// store should give up when the client has gone).
type Limits interface {
	Check(ctx context.Context, key []byte, cost uint64) ([]LimitDecision, error)
}

// Checker is the shape of a single limiter: *ratecell.Limiter has it, and
// so can any other limiter deciding a ratecell.Request. The middleware's
// requests name a byte key (ratecell.BytesKey), a cost, and no time or
// tier.
type Checker interface {
	Check(r ratecell.Request) (ratecell.Decision, error)
}

type single struct {
	name   string
	limit  uint64
	period time.Duration
	c      Checker
}

// PolicyField is the RateLimit-Policy value, the same on every response.
func (s *single) PolicyField() string {
	return PolicyField([]LimitDecision{{Name: s.name, Limit: s.limit, Period: s.period}})
}

func (s *single) Check(_ context.Context, key []byte, cost uint64) ([]LimitDecision, error) {
	d, err := s.c.Check(request(key, cost))
	if err != nil {
		return nil, err
	}
	return []LimitDecision{{Name: s.name, Limit: s.limit, Period: s.period, Decision: d}}, nil
}

// Single is one limit of limit units per period, named name (DefaultName
// when empty), decided by c.
func Single(name string, limit uint64, period time.Duration, c Checker) (Limits, error) {
	if name == "" {
		name = DefaultName
	}
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if c == nil {
		return nil, errors.New("ratehttp: Single: checker is nil")
	}
	return &single{name: name, limit: limit, period: period, c: c}, nil
}

// FromLimiter is Single named DefaultName with the limiter's own limit and
// period.
func FromLimiter(l *ratecell.Limiter) (Limits, error) {
	cfg, err := l.Config()
	if err != nil {
		return nil, err
	}
	return Single(DefaultName, cfg.Limit, cfg.Period, l)
}

// Policy is one limit's name, quota and window, as the fields show it.
type Policy struct {
	Name   string
	Limit  uint64
	Period time.Duration
}

// EachChecker is the shape of a multi-limit limiter: *ratecell.Limiter has
// it (made by ratecell.NewWith of several Options.Limits).
type EachChecker interface {
	CheckEach(r ratecell.Request) (ratecell.MultiDecision, error)
}

// request is the ratecell.Request of one HTTP request: its byte key, its
// cost (0: a peek).
func request(key []byte, cost uint64) ratecell.Request {
	return ratecell.Request{Key: ratecell.BytesKey(key), Cost: cost, Peek: cost == 0}
}

// TierLimits are Limits with a quota per tier (free, paid, internal...),
// each request's tier chosen by Options.Tier. CheckTier decides as Check
// under tier; a tier the limits do not have is the default tier, 0, so no
// client can choose a quota it was not given. Check is the default tier's.
type TierLimits interface {
	Limits
	CheckTier(ctx context.Context, key []byte, cost uint64, tier int) ([]LimitDecision, error)
}

type tiered struct {
	policies []Policy
	c        Checker
}

func (t *tiered) Check(ctx context.Context, key []byte, cost uint64) ([]LimitDecision, error) {
	return t.CheckTier(ctx, key, cost, 0)
}

func (t *tiered) CheckTier(_ context.Context, key []byte, cost uint64, tier int) ([]LimitDecision, error) {
	if tier < 0 || tier >= len(t.policies) {
		tier = 0
	}
	r := request(key, cost)
	r.Tier = tier
	d, err := t.c.Check(r)
	if err != nil {
		return nil, err
	}
	p := t.policies[tier]
	return []LimitDecision{{Name: p.Name, Limit: p.Limit, Period: p.Period, Decision: d}}, nil
}

// Tiered is a limiter of one limit per tier (ratecell.NewWith with
// Options.Tiers), tier t's limit being tiers[t], under its own policy
// name: the fields name the request's tier and give its quota. Tier 0 is
// the default tier.
func Tiered(tiers []Policy, c Checker) (TierLimits, error) {
	if len(tiers) == 0 {
		return nil, errors.New("ratehttp: Tiered: give one policy per tier")
	}
	for i, p := range tiers {
		if p.Name == "" {
			return nil, fmt.Errorf("ratehttp: Tiered: tier %d has no name: name every tier", i)
		}
	}
	policies, err := CheckPolicies(tiers)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, errors.New("ratehttp: Tiered: checker is nil")
	}
	return &tiered{policies: policies, c: c}, nil
}

type multi struct {
	policies []Policy
	c        EachChecker
}

// PolicyField is the RateLimit-Policy value, the same on every response.
func (m *multi) PolicyField() string {
	items := make([]LimitDecision, len(m.policies))
	for i, p := range m.policies {
		items[i] = LimitDecision{Name: p.Name, Limit: p.Limit, Period: p.Period}
	}
	return PolicyField(items)
}

func (m *multi) Check(_ context.Context, key []byte, cost uint64) ([]LimitDecision, error) {
	d, err := m.c.CheckEach(request(key, cost))
	if err != nil {
		return nil, err
	}
	return Items(m.policies, d)
}

// Items pairs each limit's decision in d with its policy. A limit that
// would admit a request another refuses reports Allowed (it spent
// nothing), so the refusing items are exactly the limits that refused;
// when no limit refused but d is a refusal (a keyed table with no room for
// a new key), every item is marked refused with d's RetryAfter.
func Items(policies []Policy, d ratecell.MultiDecision) ([]LimitDecision, error) {
	if len(d.Limits) != len(policies) {
		return nil, fmt.Errorf("ratehttp: %d decisions for %d policies", len(d.Limits), len(policies))
	}
	noRoom := !d.Allowed && d.DeniedBy < 0
	items := make([]LimitDecision, len(policies))
	for i, p := range policies {
		dec := d.Limits[i]
		if noRoom {
			dec.Allowed = false
			dec.RetryAfter = d.RetryAfter
		}
		items[i] = LimitDecision{Name: p.Name, Limit: p.Limit, Period: p.Period, Decision: dec}
	}
	return items, nil
}

// CheckPolicies returns an error naming the first bad policy: a name that
// is not an RFC 9651 String, or one given twice. With one policy an empty
// name becomes DefaultName.
func CheckPolicies(policies []Policy) ([]Policy, error) {
	if len(policies) == 0 {
		return nil, errors.New("ratehttp: no policies")
	}
	out := append([]Policy(nil), policies...)
	seen := make(map[string]bool, len(out))
	for i := range out {
		if out[i].Name == "" && len(out) == 1 {
			out[i].Name = DefaultName
		}
		if out[i].Name == "" {
			return nil, fmt.Errorf("ratehttp: limit %d has no name: name every limit of several", i)
		}
		if err := CheckName(out[i].Name); err != nil {
			return nil, fmt.Errorf("limit %d: %w", i, err)
		}
		if seen[out[i].Name] {
			return nil, fmt.Errorf("ratehttp: limit %d: name %q is already another limit's: names must differ", i, out[i].Name)
		}
		seen[out[i].Name] = true
	}
	return out, nil
}

// Multi is the limits of c, decided together by one CheckEach
// (all-or-nothing), one item per policy, in the order of c's limits.
func Multi(policies []Policy, c EachChecker) (Limits, error) {
	policies, err := CheckPolicies(policies)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, errors.New("ratehttp: Multi: checker is nil")
	}
	return &multi{policies: policies, c: c}, nil
}

// FromMulti is Multi over a limiter of several limits (ratecell.NewWith), each limit
// under the Name it was given there (a lone unnamed limit is DefaultName).
func FromMulti(l *ratecell.Limiter) (Limits, error) {
	limits, err := l.Limits()
	if err != nil {
		return nil, err
	}
	policies := make([]Policy, len(limits))
	for i, lim := range limits {
		policies[i] = Policy{Name: lim.Name, Limit: lim.Limit, Period: lim.Period}
	}
	return Multi(policies, l)
}

// MissingKey says what happens to a request whose Key function found no
// key (a header the client did not send).
type MissingKey int

const (
	// MissingKeyReject: the request is refused with 400 and a problem
	// document. The default: a client that leaves its key out learns it
	// at once, rather than sharing one quota with every other such client.
	MissingKeyReject MissingKey = iota
	// MissingKeyShared: keyless requests share one key, so together they
	// get one quota and leaving the key out never buys more.
	MissingKeyShared
	// MissingKeySkip: the request is not limited and gets no fields.
	MissingKeySkip
)

// Options configure Middleware; the zero value keys by client address,
// charges 1 per request and enforces.
type Options struct {
	// Key returns the request's key; nil or empty means no key, which
	// MissingKey decides. Default: the client's address, found and grouped
	// as ClientIP says; a request without a peer address (a Unix socket,
	// a handler called directly) then gets 500 and a logged error, since
	// keying them all on one key would share one quota among all clients.
	Key func(*http.Request) []byte
	// ClientIP configures the default key (trusted proxies, prefixes); it
	// is not used when Key is set. Middleware panics when it is invalid.
	ClientIP ClientIPOptions
	// MissingKey is the policy for requests for which Key found no key
	// (default: MissingKeyReject).
	MissingKey MissingKey
	// Cost returns the request's cost (0 is a peek). Default: 1.
	Cost func(*http.Request) uint64
	// DryRun counts requests and sets the fields but never refuses one.
	DryRun bool
	// ExemptPaths are URL paths (exact match) that skip the limiter.
	ExemptPaths []string
	// Exempt, when it returns true, skips the limiter.
	Exempt func(*http.Request) bool
	// Methods, when not empty, are the only methods limited (say POST on
	// a login route); requests with others pass without fields.
	Methods []string
	// FailOpen passes requests (without fields) when Limits returns an
	// error; by default they get 503 (fail closed).
	FailOpen bool
	// OnRefusal answers refused requests instead of the problem document
	// (httprate's WithLimitHandler): the RateLimit fields and Retry-After
	// are already set on w when it is called, and it writes the rest.
	OnRefusal func(w http.ResponseWriter, r *http.Request, items []LimitDecision)
	// OnDryRunRefusal sees every request the limits refused in a dry run
	// (and the middleware let through), before the handler runs.
	OnDryRunRefusal func(r *http.Request, items []LimitDecision)
	// Observe sees every limited request's decisions, whether every limit
	// admitted it, and whether this is a dry run: the place for metrics
	// (github.com/ratecell/ratecell-go/prometheus counts them per policy).
	// Default: none.
	Observe func(items []LimitDecision, admitted, dryRun bool)
	// OnStoreError sees every failure of Limits (a Redis store that did
	// not answer) with its request, before FailOpen decides the answer;
	// failedOpen says which it is (passed, or 503). The prometheus
	// module's Metrics.StoreError counts them. Whether or not it is set,
	// failures are logged (log.Printf): the first at once, then at most
	// one line every StoreErrorLogInterval with the count since, so a
	// store that fails open is never silent and an outage does not write
	// a line per request.
	OnStoreError func(r *http.Request, err error, failedOpen bool)
	// Disabled turns limiting off (tests, staging; from a setting read at
	// start-up): Middleware returns the handler itself, so requests pass
	// unchecked and without fields.
	Disabled bool
	// LegacyHeaders also sends X-RateLimit-Limit, X-RateLimit-Remaining
	// and X-RateLimit-Reset (UNIX seconds), which clients written for
	// GitHub's or httprate's headers read, beside the draft's fields, for
	// one limit (LegacyValues says which).
	LegacyHeaders bool
	// Tier chooses each request's tier (a plan from a header, a claim,
	// the route) among the tiers of TierLimits (Tiered); a tier they do
	// not have is the default tier. Middleware panics when it is set and
	// the limits have no tiers.
	Tier func(*http.Request) int
}

// StoreErrorLogInterval is the least time between two log lines of store
// failures (the first is logged at once).
const StoreErrorLogInterval = 10 * time.Second

// ErrNoDecisions is the store failure of a Limits that returned no
// decisions and no error.
var ErrNoDecisions = errors.New("ratehttp: the limits returned no decisions")

// storeErrorLog writes the store failures' log line, at most once per
// StoreErrorLogInterval.
type storeErrorLog struct {
	mu    sync.Mutex
	next  time.Time
	since int
}

func (l *storeErrorLog) failed(err error, failedOpen bool) {
	now := time.Now()
	l.mu.Lock()
	l.since++
	if now.Before(l.next) {
		l.mu.Unlock()
		return
	}
	since := l.since
	l.since = 0
	l.next = now.Add(StoreErrorLogInterval)
	l.mu.Unlock()
	answer := "requests get 503"
	if failedOpen {
		answer = "requests pass unlimited (FailOpen)"
	}
	log.Printf("ratehttp: the rate-limit store failed (%v); %s; %d failure(s) since the last such line", err, answer, since)
}

// ClientAddr is the IP of r.RemoteAddr as text (the port is dropped: a
// client opens many connections), every IPv6 address its own key. The
// default key is ClientIP's, which groups IPv6 clients by /64 and can read
// trusted proxies' headers.
func ClientAddr(r *http.Request) []byte {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return []byte(host)
}

// KeyParts keys requests by several parts at once (the client's address
// and the route, say): each part's value in order, length-prefixed so no
// two lists of values give the same key. A part with no value makes the
// request keyless, which Options.MissingKey decides. For the client's
// address as the middleware finds it, give ClientIP's function:
//
//	addr, _ := ratehttp.ClientIP(ratehttp.ClientIPOptions{})
//	opts := ratehttp.Options{Key: ratehttp.KeyParts(addr, ratehttp.PathKey)}
func KeyParts(parts ...func(*http.Request) []byte) func(*http.Request) []byte {
	return func(r *http.Request) []byte {
		var key []byte
		for _, part := range parts {
			v := part(r)
			if len(v) == 0 {
				return nil
			}
			key = binary.BigEndian.AppendUint32(key, uint32(len(v)))
			key = append(key, v...)
		}
		return key
	}
}

// PathKey is the request's URL path, a part for KeyParts.
func PathKey(r *http.Request) []byte { return []byte(r.URL.Path) }

// MethodKey is the request's method, a part for KeyParts.
func MethodKey(r *http.Request) []byte { return []byte(r.Method) }

// Header keys requests by the value of header name (an API key).
func Header(name string) func(*http.Request) []byte {
	canonical := http.CanonicalHeaderKey(name)
	return func(r *http.Request) []byte {
		v := r.Header[canonical]
		if len(v) == 0 {
			return nil
		}
		return []byte(v[0])
	}
}

const problemJSON = "application/problem+json"

var missingKeyBody = []byte(`{"type":"about:blank","title":"Bad Request","status":400,"detail":"the request carries no rate-limit key"}`)
var noClientAddrBody = []byte(`{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"rate limiting: the request has no client address to key on; serve over TCP, or set ratehttp.Options.Key"}`)
var unavailableBody = []byte(`{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the rate limiter failed"}`)

// Middleware returns the rate-limiting middleware for limits.
func Middleware(limits Limits, opts Options) func(http.Handler) http.Handler {
	key := opts.Key
	byAddr := key == nil
	if byAddr {
		var err error
		if key, err = ClientIP(opts.ClientIP); err != nil {
			panic(err)
		}
	}
	var tiers TierLimits
	if opts.Tier != nil {
		var ok bool
		if tiers, ok = limits.(TierLimits); !ok {
			panic(fmt.Sprintf("ratehttp: Options.Tier chooses among tiers: give Middleware TierLimits (ratehttp.Tiered), not %T", limits))
		}
	}
	var loggedNoAddr atomic.Bool
	storeLog := &storeErrorLog{}
	// A Limits whose policies are fixed says its RateLimit-Policy once.
	policy := ""
	if p, ok := limits.(interface{ PolicyField() string }); ok {
		policy = p.PolicyField()
	}
	exempt := make(map[string]struct{}, len(opts.ExemptPaths))
	for _, p := range opts.ExemptPaths {
		exempt[p] = struct{}{}
	}
	methods := append([]string(nil), opts.Methods...)
	return func(next http.Handler) http.Handler {
		if opts.Disabled {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if len(methods) > 0 && !slices.Contains(methods, r.Method) {
				next.ServeHTTP(w, r)
				return
			}
			if _, ok := exempt[r.URL.Path]; ok || (opts.Exempt != nil && opts.Exempt(r)) {
				next.ServeHTTP(w, r)
				return
			}
			k := key(r)
			if len(k) == 0 && byAddr {
				// A misconfiguration, not a client's doing: said at the first
				// request, to the developer (log) and in the answer.
				if !loggedNoAddr.Swap(true) {
					log.Printf("ratehttp: request with RemoteAddr %q has no client address to key on: answering 500 (set Options.Key to key such requests)", r.RemoteAddr)
				}
				writeProblem(w, http.StatusInternalServerError, noClientAddrBody)
				return
			}
			if len(k) == 0 {
				switch opts.MissingKey {
				case MissingKeySkip:
					next.ServeHTTP(w, r)
					return
				case MissingKeyShared:
				default:
					writeProblem(w, http.StatusBadRequest, missingKeyBody)
					return
				}
				// Shared: the empty key, which no real key is.
				k = []byte{}
			}
			cost := uint64(1)
			if opts.Cost != nil {
				cost = opts.Cost(r)
			}
			var items []LimitDecision
			var err error
			if tiers == nil {
				items, err = limits.Check(r.Context(), k, cost)
			} else {
				items, err = tiers.CheckTier(r.Context(), k, cost, opts.Tier(r))
			}
			if err != nil || len(items) == 0 {
				if err == nil {
					err = ErrNoDecisions
				}
				if opts.OnStoreError != nil {
					opts.OnStoreError(r, err, opts.FailOpen)
				}
				storeLog.failed(err, opts.FailOpen)
				if opts.FailOpen {
					next.ServeHTTP(w, r)
				} else {
					writeProblem(w, http.StatusServiceUnavailable, unavailableBody)
				}
				return
			}
			if opts.Observe != nil {
				opts.Observe(items, Admitted(items), opts.DryRun)
			}
			h := w.Header()
			// Canonical keys, set directly: no canonicalization per request.
			// Appended: a middleware outside this one (an application-wide
			// limit around per-client ones) has set its own field lines,
			// which the client reads as one list.
			if policy != "" {
				h["Ratelimit-Policy"] = append(h["Ratelimit-Policy"], policy)
			} else {
				h["Ratelimit-Policy"] = append(h["Ratelimit-Policy"], PolicyField(items))
			}
			h["Ratelimit"] = append(h["Ratelimit"], RateLimitField(items))
			if opts.LegacyHeaders {
				if limit, remaining, reset, ok := LegacyValues(items, time.Now()); ok {
					h["X-Ratelimit-Limit"] = []string{strconv.FormatUint(limit, 10)}
					h["X-Ratelimit-Remaining"] = []string{strconv.FormatUint(remaining, 10)}
					h["X-Ratelimit-Reset"] = []string{strconv.FormatUint(reset, 10)}
				}
			}
			if opts.DryRun {
				if opts.OnDryRunRefusal != nil && !Admitted(items) {
					opts.OnDryRunRefusal(r, items)
				}
				next.ServeHTTP(w, r)
				return
			}
			if !Admitted(items) {
				if s, ok := RetryAfterSeconds(items); ok {
					h["Retry-After"] = []string{strconv.FormatUint(s, 10)}
				}
				if opts.OnRefusal != nil {
					opts.OnRefusal(w, r, items)
					return
				}
				writeProblem(w, http.StatusTooManyRequests, ProblemBody(items))
				return
			}
			// A leaky bucket admitted the request with a place in its queue:
			// it runs when its turn comes (or not at all if the client leaves).
			var wait time.Duration
			for _, it := range items {
				wait = max(wait, it.Decision.Wait)
			}
			if wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-r.Context().Done():
					t.Stop()
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

func writeProblem(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", problemJSON)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
