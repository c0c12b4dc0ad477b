package ratecell

// This file is the lease protocol of SPEC.md section 8 through the C ABI
// (ratecell_leases_*, ratecell_grant_*, ratecell_denials_*): the local
// spending and the grant bookkeeping, with no I/O. A client of the Redis
// module (github.com/ratecell/ratecell-go/redis) carries each Grant's
// command to Redis and hands the reply back to Complete.

/*
#include <stdlib.h>
#include "ratecell.h"

#cgo noescape rc_leases_check
#cgo nocallback rc_leases_check
#cgo noescape rc_denials_check
#cgo nocallback rc_denials_check
#cgo noescape rc_denials_remember
#cgo nocallback rc_denials_remember

// As RC_REQUEST in ratecell.go: the request is built here, from its
// fields, so no Go memory handed to C holds a Go pointer.
#define RC_LEASE_REQUEST(r) struct ratecell_request r = {sizeof r, 0, id, bytes, bytes ? n : 0, cost, at_ns}
// The step of a leased check (a RATECELL_STEP_*, 0 or more), or the
// negated status of a failed call: one integer back, so the call passes
// Go no pointer but the decision's.
static inline int64_t rc_leases_check(uintptr_t h, uint64_t id, const uint8_t *bytes, size_t n, uint64_t cost, uint64_t at_ns, struct ratecell_decision *out, uintptr_t *grant) {
	RC_LEASE_REQUEST(r);
	ratecell_grant *g = NULL;
	uint32_t step = 0;
	ratecell_status s = ratecell_leases_check((const ratecell_leases *)h, &r, &step, out, &g);
	*grant = (uintptr_t)g;
	return s == RATECELL_OK ? (int64_t)step : -(int64_t)s;
}
// Whether a denial is remembered (1) or not (0), or the negated status of
// a failed call.
static inline int64_t rc_denials_check(uintptr_t h, uint64_t id, const uint8_t *bytes, size_t n, uint64_t at_ns, struct ratecell_decision *out) {
	uint64_t cost = 1;
	RC_LEASE_REQUEST(r);
	bool found = false;
	ratecell_status s = ratecell_denials_check((const ratecell_denials *)h, &r, &found, out);
	return s == RATECELL_OK ? (int64_t)found : -(int64_t)s;
}
static inline ratecell_status rc_denials_remember(uintptr_t h, uint64_t id, const uint8_t *bytes, size_t n, uint64_t at_ns, const struct ratecell_decision *d) {
	uint64_t cost = 1;
	RC_LEASE_REQUEST(r);
	return ratecell_denials_remember((const ratecell_denials *)h, &r, d);
}
// The grant's command's argument count, and its argument i (owned by the
// grant) with its length: a pointer into C memory, returned as one.
static inline size_t rc_grant_argc(uintptr_t g) {
	size_t n = 0;
	ratecell_grant_command((const ratecell_grant *)g, NULL, NULL, 0, &n);
	return n;
}
static inline const uint8_t *rc_grant_arg(uintptr_t g, size_t i, size_t *len) {
	const uint8_t *args[RATECELL_LEASE_MAX_ARGS];
	size_t lens[RATECELL_LEASE_MAX_ARGS], n = 0;
	if (ratecell_grant_command((const ratecell_grant *)g, args, lens, RATECELL_LEASE_MAX_ARGS, &n) != RATECELL_OK || i >= n) {
		*len = 0;
		return NULL;
	}
	*len = lens[i];
	return args[i];
}
static inline ratecell_status rc_leases_complete(uintptr_t h, uintptr_t g, const int64_t *reply, size_t n, uint64_t now_ns, struct ratecell_completion *out) {
	return ratecell_leases_complete((const ratecell_leases *)h, (const ratecell_grant *)g, reply, n, now_ns, out);
}
static inline ratecell_status rc_leases_retry(uintptr_t h, uintptr_t g, uint64_t at_ns, uintptr_t *out) {
	ratecell_grant *r = NULL;
	ratecell_status s = ratecell_leases_retry((const ratecell_leases *)h, (const ratecell_grant *)g, at_ns, &r);
	*out = (uintptr_t)r;
	return s;
}
static inline ratecell_status rc_grant_info(uintptr_t g, struct ratecell_grant_info *out) {
	return ratecell_grant_info((const ratecell_grant *)g, out);
}
static inline void rc_grant_free(uintptr_t g) { ratecell_grant_free((ratecell_grant *)g); }
static inline void rc_leases_free(uintptr_t h) { ratecell_leases_free((ratecell_leases *)h); }
static inline void rc_denials_free(uintptr_t h) { ratecell_denials_free((ratecell_denials *)h); }
static inline uint64_t rc_leases_now_ns(uintptr_t h) { return ratecell_leases_now_ns((const ratecell_leases *)h); }
static inline ratecell_status rc_leases_stats(uintptr_t h, struct ratecell_lease_stats *out) {
	return ratecell_leases_stats((const ratecell_leases *)h, out);
}
static inline ratecell_status rc_leases_new(const struct ratecell_config *cfg, uint32_t failure, uint32_t nodes, uint32_t send_at, uint64_t max_grant, uint64_t horizon, uint64_t expire, uint64_t skew, const uint8_t *prefix, size_t prefix_len, uintptr_t *out) {
	struct ratecell_lease_options o;
	ratecell_lease_options_init(&o);
	o.failure = failure;
	o.expected_nodes = nodes;
	o.send_at = send_at;
	o.max_grant = max_grant;
	o.horizon_ns = horizon;
	o.expire_ns = expire;
	o.skew_ns = skew;
	o.prefix = prefix;
	o.prefix_len = prefix_len;
	ratecell_leases *l = NULL;
	ratecell_status s = ratecell_leases_new(cfg, &o, &l);
	*out = (uintptr_t)l;
	return s;
}
static inline ratecell_status rc_denials_new(uint64_t capacity, uint32_t clock, uintptr_t *out) {
	ratecell_denials *d = NULL;
	ratecell_status s = ratecell_denials_new(capacity, clock, &d);
	*out = (uintptr_t)d;
	return s;
}
*/
import "C"

import (
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Statuses of the lease protocol's C ABI.
const (
	// StatusNotLeasable: the algorithm cannot be leased.
	StatusNotLeasable Status = C.RATECELL_NOT_LEASABLE
	// StatusInvalidMaxGrant: MaxGrant is above the limit.
	StatusInvalidMaxGrant Status = C.RATECELL_INVALID_MAX_GRANT
	// StatusInvalidHorizon: Horizon is longer than the period.
	StatusInvalidHorizon Status = C.RATECELL_INVALID_HORIZON
	// StatusInvalidExpire: a LeaseExpiry for another algorithm than GCRA,
	// or outside one emission interval ..= the period.
	StatusInvalidExpire Status = C.RATECELL_INVALID_EXPIRE
	// StatusInvalidSkew: Skew is not less than the period.
	StatusInvalidSkew Status = C.RATECELL_INVALID_SKEW
	// StatusInvalidFailure: an unknown failure policy, or ExpectedNodes 0.
	StatusInvalidFailure Status = C.RATECELL_INVALID_FAILURE
	// StatusInvalidReply: not RATECELL.LEASE's reply.
	StatusInvalidReply Status = C.RATECELL_INVALID_REPLY
	// StatusInvalidGrant: a grant given to leases that did not make it.
	StatusInvalidGrant Status = C.RATECELL_INVALID_GRANT
)

// FailurePolicy decides a check that finds no units while Redis does not
// answer (SPEC.md section 8).
type FailurePolicy uint32

const (
	// FailDeny denies, RetryAfter the time until the next attempt.
	FailDeny FailurePolicy = C.RATECELL_FAILURE_DENY
	// FailLocal decides by a limiter of the node's own, the limit divided
	// by the expected number of nodes.
	FailLocal FailurePolicy = C.RATECELL_FAILURE_LOCAL
)

// Step is what a leased check found to do.
type Step int32

const (
	// StepDecided: decided here.
	StepDecided Step = C.RATECELL_STEP_DECIDED
	// StepRefill: decided here; fetch the Grant in the background.
	StepRefill Step = C.RATECELL_STEP_REFILL
	// StepFetch: no units; fetch the Grant now, its completion decides.
	StepFetch Step = C.RATECELL_STEP_FETCH
	// StepDirect: the key cannot be tracked; ask Redis with RATECELL.CHECK.
	StepDirect Step = C.RATECELL_STEP_DIRECT
)

// LeaseOptions says how a node holds grants of a leased limit; the zero
// value is SPEC.md section 8's defaults with the deny policy.
type LeaseOptions struct {
	// Failure is the failure policy (FailDeny by default).
	Failure FailurePolicy
	// ExpectedNodes is how many nodes share the limit, for FailLocal (0: 1).
	ExpectedNodes uint32
	// SendAt sends each check's time as AT, so the server decides on the
	// node's timeline (explicit times: tests, replays).
	SendAt bool
	// MaxGrant is W, the largest grant (0: a tenth of the limit).
	MaxGrant uint64
	// Horizon is H, the refill horizon (0: a tenth of the period).
	Horizon time.Duration
	// LeaseExpiry is E, a GCRA grant's lifetime (0: the module's default).
	LeaseExpiry time.Duration
	// Skew is the margin for the clock skew between node and server (0:
	// 1 ms; negative: none, as with SendAt).
	Skew time.Duration
	// Prefix is prepended to a key's bytes to make its Redis key.
	Prefix []byte
}

// Leases is a node's grants of one leased limit (ratecell_leases): the
// units in hand per key, spent by Check on an atomic word, and the
// protocol's bookkeeping. Safe for concurrent use; Close releases it.
type Leases struct {
	h      C.uintptr_t
	state  atomic.Int64 // calls inside the library, plus closedBit
	free   runtime.Cleanup
	closed atomic.Bool
}

// NewLeases makes the leases of cfg (Algorithm, Limit, Period, Burst; Capacity
// is how many keys the node tracks, 0 for 65,536; Clock the clock read for
// a check without a time) held as o says. A bad field is an *Error naming
// it (ErrInvalidLimit, StatusNotLeasable, StatusInvalidMaxGrant, ...).
func NewLeases(cfg Config, o LeaseOptions) (*Leases, error) {
	c := cConfig(cfg)
	nodes := o.ExpectedNodes
	if nodes == 0 {
		nodes = 1
	}
	skew := uint64(time.Millisecond)
	if o.Skew > 0 {
		skew = uint64(o.Skew)
	} else if o.Skew < 0 {
		skew = 0
	}
	var sendAt C.uint32_t
	if o.SendAt {
		sendAt = 1
	}
	var prefix *C.uint8_t
	if len(o.Prefix) > 0 {
		prefix = (*C.uint8_t)(unsafe.Pointer(&o.Prefix[0]))
	}
	var h C.uintptr_t
	status := C.rc_leases_new(&c, C.uint32_t(o.Failure), C.uint32_t(nodes), sendAt,
		C.uint64_t(o.MaxGrant), C.uint64_t(nonNegative(o.Horizon)), C.uint64_t(nonNegative(o.LeaseExpiry)),
		C.uint64_t(skew), prefix, C.size_t(len(o.Prefix)), &h)
	runtime.KeepAlive(o.Prefix)
	if err := statusError("leases", status); err != nil {
		return nil, err
	}
	l := &Leases{h: h}
	l.free = runtime.AddCleanup(l, func(h C.uintptr_t) { C.rc_leases_free(h) }, h)
	return l, nil
}

func nonNegative(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d
}

func (l *Leases) enter() (C.uintptr_t, error) {
	if l == nil || l.state.Add(1)&closedBit != 0 {
		if l != nil {
			l.state.Add(-1)
		}
		return 0, ErrClosed
	}
	return l.h, nil
}

func (l *Leases) exit() { l.state.Add(-1) }

// Close releases the leases, after the calls already inside the library;
// later calls return ErrClosed. Grants it made may still be freed.
func (l *Leases) Close() error {
	for {
		s := l.state.Load()
		if s&closedBit != 0 {
			return nil
		}
		if l.state.CompareAndSwap(s, s|closedBit) {
			break
		}
	}
	for l.state.Load() != closedBit {
		runtime.Gosched()
	}
	l.free.Stop()
	C.rc_leases_free(l.h)
	return nil
}

// Grant is one RATECELL.LEASE to send, made by Leases.Check or
// Leases.Retry. Owned by one goroutine at a time; Free releases it (a
// cleanup does, if not).
type Grant struct {
	g    C.uintptr_t
	free runtime.Cleanup
}

func newGrant(g C.uintptr_t) *Grant {
	if g == 0 {
		return nil
	}
	grant := &Grant{g: g}
	grant.free = runtime.AddCleanup(grant, func(g C.uintptr_t) { C.rc_grant_free(g) }, g)
	return grant
}

// Free releases the grant; it must not be used afterwards. Nil is a no-op.
func (g *Grant) Free() {
	if g == nil || g.g == 0 {
		return
	}
	g.free.Stop()
	C.rc_grant_free(g.g)
	g.g = 0
}

// Command is the grant's RATECELL.LEASE command, its name first, each
// argument a copy.
func (g *Grant) Command() [][]byte {
	args := make([][]byte, int(C.rc_grant_argc(g.g)))
	for i := range args {
		var n C.size_t
		p := C.rc_grant_arg(g.g, C.size_t(i), &n)
		args[i] = C.GoBytes(unsafe.Pointer(p), C.int(n))
	}
	runtime.KeepAlive(g)
	return args
}

// GrantInfo is what a grant asks for.
type GrantInfo struct {
	Key     []byte // the key's bytes, without the prefix
	Want    uint64 // units asked for
	AtNs    uint64 // the time of the check that asked (UNIX ns)
	IsFetch bool   // a check waits on it
}

// Info tells what the grant asks for.
func (g *Grant) Info() GrantInfo {
	var i C.struct_ratecell_grant_info
	C.rc_grant_info(g.g, &i)
	info := GrantInfo{
		Key:     C.GoBytes(unsafe.Pointer(i.key), C.int(i.key_len)),
		Want:    uint64(i.want),
		AtNs:    uint64(i.at_ns),
		IsFetch: bool(i.is_fetch),
	}
	runtime.KeepAlive(g)
	return info
}

// Check spends r's cost from the units held for r.Key (r.At, else the
// leases' clock; r.Tier must be 0) and says what to do: StepDecided and
// StepRefill carry the decision, StepRefill and StepFetch a Grant (the
// caller's).
func (l *Leases) Check(r Request) (step Step, d Decision, g *Grant, err error) {
	step, g, err = l.check(&r, &d)
	return
}

// check has the library write d in place, for the reason Limiter.check
// gives: Check is small enough for Go to inline, so d is the caller's own
// variable, and no copy of a Decision the library has just written (a
// load across smaller stores) waits for them to reach the cache.
func (l *Leases) check(r *Request, d *Decision) (Step, *Grant, error) {
	h, err := l.enter()
	if err != nil {
		return 0, nil, err
	}
	if r.Tier != 0 {
		l.exit()
		return 0, nil, &Error{Op: "leases check", Status: StatusInvalidTier}
	}
	id, ptr, n := r.Key.c()
	var g C.uintptr_t
	step := C.rc_leases_check(h, id, ptr, n, r.cost(), at(r.At), d.cDecision(), &g)
	l.exit()
	if step < 0 {
		*d = Decision{}
		return 0, nil, statusError("leases check", C.ratecell_status(-step))
	}
	d.saturate()
	return Step(step), newGrant(g), nil
}

// Completion is what a grant's reply, or its absence, decided.
type Completion struct {
	// Decided: Decision is the waiting check's (a fetch).
	Decided  bool
	Decision Decision
	// Retry: the grant failed; ask again at RetryAtNs (Leases.Retry).
	Retry     bool
	RetryAtNs uint64
}

// Complete hands back the reply to g: RATECELL.LEASE's integers, or nil
// when there was none in time. nowNs is when it came (0: the leases'
// clock). A reply that is not RATECELL.LEASE's counts as none.
func (l *Leases) Complete(g *Grant, reply []int64, nowNs uint64) (Completion, error) {
	h, err := l.enter()
	if err != nil {
		return Completion{}, err
	}
	defer l.exit()
	var out C.struct_ratecell_completion
	var status C.ratecell_status = C.RATECELL_INVALID_REPLY
	if reply != nil {
		var p *C.int64_t
		if len(reply) > 0 {
			p = (*C.int64_t)(unsafe.Pointer(&reply[0]))
		}
		status = C.rc_leases_complete(h, g.g, p, C.size_t(len(reply)), at(nowNs), &out)
	}
	if status == C.RATECELL_INVALID_REPLY {
		status = C.rc_leases_complete(h, g.g, nil, 0, at(nowNs), &out)
	}
	runtime.KeepAlive(g)
	if err := statusError("leases complete", status); err != nil {
		return Completion{}, err
	}
	c := Completion{Decided: bool(out.has_decision), Retry: bool(out.has_retry), RetryAtNs: uint64(out.retry_at_ns)}
	c.Decision = *(*Decision)(unsafe.Pointer(&out.decision))
	c.Decision.saturate()
	return c, nil
}

// Retry is a new grant asking again for what g asked, at atNs, in the
// background.
func (l *Leases) Retry(g *Grant, atNs uint64) (*Grant, error) {
	h, err := l.enter()
	if err != nil {
		return nil, err
	}
	defer l.exit()
	var r C.uintptr_t
	status := C.rc_leases_retry(h, g.g, C.uint64_t(atNs), &r)
	runtime.KeepAlive(g)
	if err := statusError("leases retry", status); err != nil {
		return nil, err
	}
	return newGrant(r), nil
}

// NowNs is the leases' clock (UNIX ns).
func (l *Leases) NowNs() uint64 {
	h, err := l.enter()
	if err != nil {
		return 0
	}
	defer l.exit()
	return uint64(C.rc_leases_now_ns(h))
}

// LeaseStats are a node's lease counters (struct ratecell_lease_stats).
type LeaseStats struct {
	Fetches, Refills, Replies, UnitsGranted, EmptyGrants, Failures uint64
	// LeaseFallbacks counts checks the failure policy decided.
	LeaseFallbacks    uint64
	RememberedDenials uint64
	Direct            uint64
	Keys              uint64
}

// Stats reads the counters.
func (l *Leases) Stats() LeaseStats {
	h, err := l.enter()
	if err != nil {
		return LeaseStats{}
	}
	defer l.exit()
	var s C.struct_ratecell_lease_stats
	C.rc_leases_stats(h, &s)
	return LeaseStats{
		Fetches: uint64(s.fetches), Refills: uint64(s.refills), Replies: uint64(s.replies),
		UnitsGranted: uint64(s.units_granted), EmptyGrants: uint64(s.empty_grants),
		Failures: uint64(s.failures), LeaseFallbacks: uint64(s.lease_fallbacks),
		RememberedDenials: uint64(s.remembered_denials), Direct: uint64(s.direct), Keys: uint64(s.keys),
	}
}

// Denials is cached_deny's memory: the denials Redis gave, per key, until
// their RetryAfter (ratecell_denials). Safe for concurrent use; released
// by a cleanup when unreachable.
type Denials struct {
	h C.uintptr_t
}

// NewDenials makes a cache for about capacity keys (0: 65,536).
func NewDenials(capacity uint64) (*Denials, error) {
	var h C.uintptr_t
	if err := statusError("denials", C.rc_denials_new(C.uint64_t(capacity), 0, &h)); err != nil {
		return nil, err
	}
	d := &Denials{h: h}
	runtime.AddCleanup(d, func(h C.uintptr_t) { C.rc_denials_free(h) }, h)
	return d, nil
}

// Check is the remembered denial of r.Key at r.At (0: the cache's clock),
// if one is running. The cost and tier are not read: a denial is the
// key's.
func (c *Denials) Check(r Request) (Decision, bool) {
	var d Decision
	id, ptr, n := r.Key.c()
	found := C.rc_denials_check(c.h, id, ptr, n, at(r.At), d.cDecision())
	runtime.KeepAlive(c)
	d.saturate()
	return d, found == 1
}

// Remember keeps Redis's decision d for r.Key, made at r.At (0: the
// cache's clock), if it is a denial a wait can end.
func (c *Denials) Remember(r Request, d Decision) {
	id, ptr, n := r.Key.c()
	C.rc_denials_remember(c.h, id, ptr, n, at(r.At), d.cDecision())
	runtime.KeepAlive(c)
}
