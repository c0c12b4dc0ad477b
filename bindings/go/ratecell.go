// Package ratecell is the Go binding of ratecell, a lock-free in-process
// rate limiter written in Rust, called through its C ABI
// (include/ratecell.h) with cgo.
//
// A Limiter decides requests (key, cost, time) by one of seven algorithms
// and answers each with a Decision; every language binding returns exactly
// the same decisions for the same inputs (SPEC.md, and the parity trace
// under tests/parity that this package's tests replay).
//
//	lim, err := ratecell.New(ratecell.Config{
//		Algorithm: ratecell.SlidingWindow,
//		Limit:     5,
//		Period:    time.Second,
//		Capacity:  100_000, // one state per key, up to 100 000 keys
//	})
//	if err != nil { ... }
//	defer lim.Close()
//	d, err := lim.Check(ratecell.Request{Key: ratecell.StringKey(apiKey)})
//	if err == nil && !d.Allowed { /* 429, Retry-After: d.RetryAfter */ }
//
// A *Limiter may be used from any number of goroutines at once, Close
// included: Close waits for calls already inside the library and makes
// every later call return ErrClosed.
//
// The package links libratecell.a statically. On linux/amd64 it is the
// prebuilt library shipped in this module (lib/linux_amd64, linked by
// link_prebuilt_linux_amd64.go), so `go build` needs no Rust toolchain;
// with the build tag ratecell_dev (link_dev.go), and on any other
// platform, it is the one cargo builds in the repository's target
// directory (see README.md).
package ratecell

// This file owns the C header, the handle's life (New, Close, the in-flight
// guard) and the non-blocking calls; the link_*.go files own the link.
// Acquire is in acquire.go, the error model in errors.go.

/*
#cgo CFLAGS: -I${SRCDIR}/../../include

// The library keeps no pointer it is given and never calls back into Go:
// saying so lets out-parameters stay on the Go stack (no allocation per
// call) and skips the callback bookkeeping.
#cgo noescape ratecell_config_init
#cgo nocallback ratecell_config_init
#cgo noescape ratecell_limiter_new
#cgo nocallback ratecell_limiter_new
#cgo noescape ratecell_limiter_config
#cgo nocallback ratecell_limiter_config
#cgo noescape rc_check
#cgo nocallback rc_check
#cgo nocallback rc_allow
#cgo noescape rc_check_batch
#cgo nocallback rc_check_batch
#cgo noescape rc_reset
#cgo nocallback rc_reset
#cgo noescape ratecell_stats
#cgo nocallback ratecell_stats
#cgo noescape ratecell_algorithm_from_name
#cgo nocallback ratecell_algorithm_from_name
#cgo nocallback ratecell_now_ns
#cgo nocallback ratecell_limiter_free

#include <stdlib.h>
#include "ratecell.h"

// The hot calls take the handle as an integer (see enterAddr): cgo checks
// at run time every pointer argument whose pointee might hold a Go
// pointer, which it must assume of an opaque struct, and the handle is C
// memory, where that check can never find one. Each wrapper is inlined
// into the call cgo generates: one call, as before.
#define RC_H(h) ((const ratecell_limiter *)(h))

// The request, built here from its fields: Go memory handed to C may not
// hold Go pointers, and a ratecell_request holding a Go key's bytes would.
// A NULL `bytes` is the number key `id`.
#define RC_REQUEST(r) struct ratecell_request r = {sizeof r, tier, id, bytes, bytes ? n : 0, cost, at_ns}
static inline ratecell_status rc_check(uintptr_t h, uint64_t id, const uint8_t *bytes, size_t n, uint32_t tier, uint64_t cost, uint64_t at_ns, struct ratecell_decision *out) {
	RC_REQUEST(r);
	return ratecell_check(RC_H(h), &r, out);
}
static inline ratecell_status rc_reset(uintptr_t h, uint64_t id, const uint8_t *bytes, size_t n) {
	uint32_t tier = 0;
	uint64_t cost = 1, at_ns = RATECELL_NOW;
	RC_REQUEST(r);
	return ratecell_reset(RC_H(h), &r);
}
// ratecell_allow's answer (1 admitted, 0 denied) or the negated status of
// a failed call.
static inline int32_t rc_allow(uintptr_t h, uint64_t key) {
	ratecell_status s = ratecell_allow(RC_H(h), key);
	return s == RATECELL_OK ? 1 : s == RATECELL_DENIED ? 0 : -(int32_t)s;
}
static inline ratecell_status rc_check_batch(uintptr_t h, const uint64_t *keys, const uint64_t *costs, const uint32_t *tiers, size_t n, uint64_t at_ns, uint8_t *allowed, struct ratecell_decision *out) {
	struct ratecell_batch b = {sizeof b, n, keys, costs, tiers, at_ns};
	return ratecell_check_batch(RC_H(h), &b, allowed, out);
}
*/
import "C"

import (
	"math"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"
)

// Algorithm is one of the seven algorithms of SPEC.md section 4, numbered as
// in the C ABI.
type Algorithm uint32

// The algorithms.
const (
	// GCRA is the generic cell rate algorithm ("gcra").
	GCRA Algorithm = C.RATECELL_ALGORITHM_GCRA
	// LeakyBucket is a leaky bucket as a queue ("leaky_bucket"): GCRA whose
	// admitted requests learn their Wait.
	LeakyBucket Algorithm = C.RATECELL_ALGORITHM_LEAKY_BUCKET
	// TokenBucket refills Limit tokens every Period ("token_bucket").
	TokenBucket Algorithm = C.RATECELL_ALGORITHM_TOKEN_BUCKET
	// FixedWindow counts per window aligned to multiples of Period
	// ("fixed_window").
	FixedWindow Algorithm = C.RATECELL_ALGORITHM_FIXED_WINDOW
	// SlidingWindow weighs the previous window's count ("sliding_window").
	SlidingWindow Algorithm = C.RATECELL_ALGORITHM_SLIDING_WINDOW
	// BucketedWindow sums SubWindows counters ("bucketed_window").
	BucketedWindow Algorithm = C.RATECELL_ALGORITHM_BUCKETED_WINDOW
	// SlidingLog keeps every admitted request's time ("sliding_log").
	SlidingLog Algorithm = C.RATECELL_ALGORITHM_SLIDING_LOG
)

// Algorithms lists every algorithm, in C ABI order.
var Algorithms = []Algorithm{GCRA, LeakyBucket, TokenBucket, FixedWindow, SlidingWindow, BucketedWindow, SlidingLog}

// String is the algorithm's SPEC name ("gcra", "leaky_bucket", ...), or
// "Algorithm(n)" for a number that names none.
func (a Algorithm) String() string {
	name := C.ratecell_algorithm_name(C.ratecell_algorithm(a))
	if name == nil {
		return "Algorithm(" + strconv.FormatUint(uint64(a), 10) + ")"
	}
	return C.GoString(name)
}

// ParseAlgorithm looks an algorithm up by its SPEC name ("-" is accepted
// for "_"). An unknown name gives an error matching ErrUnknownAlgorithm.
func ParseAlgorithm(name string) (Algorithm, error) {
	var out C.ratecell_algorithm
	status := C.ratecell_algorithm_from_name(stringPtr(name), C.size_t(len(name)), &out)
	if err := statusError("parse algorithm", status); err != nil {
		return 0, err
	}
	return Algorithm(out), nil
}

// Overflow is what a keyed limiter does with a new key when its table is
// full.
type Overflow uint32

// The overflow policies.
const (
	// OverflowDeny denies the request (fail closed). The default.
	OverflowDeny Overflow = C.RATECELL_OVERFLOW_DENY
	// OverflowAllow admits it as an untracked fresh key (fail open).
	OverflowAllow Overflow = C.RATECELL_OVERFLOW_ALLOW
	// OverflowEvict evicts the live state nearest to fresh and tracks the
	// new key there: a flood of new keys cannot lock out the next client
	// (the policy to use behind ratehttp; SPEC §5 bounds what the evicted
	// key gains).
	OverflowEvict Overflow = C.RATECELL_OVERFLOW_EVICT
)

// Clock is which clock a limiter reads for the calls without "At".
type Clock uint32

// The clocks.
const (
	// ClockTSC reads the CPU time-stamp counter, calibrated to UNIX time
	// when the limiter is made. The default.
	ClockTSC Clock = C.RATECELL_CLOCK_TSC
	// ClockCoarse reads a process-wide time refreshed every millisecond by
	// a background thread: cheaper, up to about a millisecond behind.
	ClockCoarse Clock = C.RATECELL_CLOCK_COARSE
)

// Config describes a limiter; it mirrors struct ratecell_config. The zero
// value of every optional field is its default.
type Config struct {
	// Algorithm is required.
	Algorithm Algorithm
	// Limit is L, the units admitted per Period (1 ..= 2^32-1; for GCRA
	// and the leaky bucket at most one per nanosecond of Period).
	Limit uint64
	// Period is P (1 µs ..= 366 days), kept in whole nanoseconds.
	Period time.Duration
	// Burst is B, the units admitted at once from a fresh state (GCRA,
	// leaky bucket, token bucket); 0 means Limit. The window and log
	// algorithms take only 0 or Limit.
	Burst uint64
	// SubWindows is N for the bucketed window (1 ..= 64, dividing Period);
	// 0 means 10 when 10 divides Period, else 1. Ignored by the others.
	SubWindows uint32
	// Capacity is 0 for one shared state (every key argument is ignored),
	// more for a per-key table sized to hold that many live keys,
	// allocated by New and never grown. A size to provide for, not a cap:
	// the table may take up to about 1.45 times as many into its spare
	// places (docs/SPEC.md §5).
	Capacity uint64
	// Overflow is what a full table does with a new key.
	Overflow Overflow
	// Clock is what Check, Allow, CheckBatch and Acquire read when a
	// request names no time.
	Clock Clock
}

// Never is the RetryAfter of a request that no wait can admit (its cost is
// above what the limiter admits at once). Every duration in a Decision
// saturates at Never.
const Never = time.Duration(math.MaxInt64)

// Decision is the answer to one request (SPEC.md section 3). Durations are
// measured from the request's time. A denied request is a Decision with
// Allowed false, not an error.
//
// Its memory layout is that of struct ratecell_decision (checked when the
// package compiles), so batches are written by the library in place.
type Decision struct {
	// Allowed tells whether the request was admitted (for cost 0, a peek:
	// whether a cost-1 request would be).
	Allowed bool
	// Limit is B for GCRA, the leaky bucket and the token bucket; L for
	// the window and log algorithms.
	Limit uint64
	// Remaining is the number of cost-1 requests that would be admitted
	// now, after this decision.
	Remaining uint64
	// RetryAfter is 0 when admitted; else the least wait after which the
	// same request would be admitted; Never when it never can.
	RetryAfter time.Duration
	// ResetAfter is the time until the key is fresh again (Remaining ==
	// Limit); 0 if it is.
	ResetAfter time.Duration
	// Wait is, for an admitted leaky bucket request, how long the caller
	// must wait for its turn before acting; 0 otherwise.
	Wait time.Duration
}

// Decision and struct ratecell_decision must have one layout: the library
// writes batch decisions straight into a []Decision. Each line fails to
// compile (constant index out of range) when an offset or the size differs.
var (
	_ = [1]struct{}{}[unsafe.Sizeof(Decision{})-C.sizeof_struct_ratecell_decision]
	_ = [1]struct{}{}[C.sizeof_struct_ratecell_decision-unsafe.Sizeof(Decision{})]
	_ = [1]struct{}{}[unsafe.Offsetof(Decision{}.Allowed)-unsafe.Offsetof(C.struct_ratecell_decision{}.allowed)]
	_ = [1]struct{}{}[unsafe.Offsetof(Decision{}.Limit)-unsafe.Offsetof(C.struct_ratecell_decision{}.limit)]
	_ = [1]struct{}{}[unsafe.Offsetof(C.struct_ratecell_decision{}.limit)-unsafe.Offsetof(Decision{}.Limit)]
	_ = [1]struct{}{}[unsafe.Offsetof(Decision{}.Remaining)-unsafe.Offsetof(C.struct_ratecell_decision{}.remaining)]
	_ = [1]struct{}{}[unsafe.Offsetof(C.struct_ratecell_decision{}.remaining)-unsafe.Offsetof(Decision{}.Remaining)]
	_ = [1]struct{}{}[unsafe.Offsetof(Decision{}.RetryAfter)-unsafe.Offsetof(C.struct_ratecell_decision{}.retry_after_ns)]
	_ = [1]struct{}{}[unsafe.Offsetof(C.struct_ratecell_decision{}.retry_after_ns)-unsafe.Offsetof(Decision{}.RetryAfter)]
	_ = [1]struct{}{}[unsafe.Offsetof(Decision{}.ResetAfter)-unsafe.Offsetof(C.struct_ratecell_decision{}.reset_after_ns)]
	_ = [1]struct{}{}[unsafe.Offsetof(C.struct_ratecell_decision{}.reset_after_ns)-unsafe.Offsetof(Decision{}.ResetAfter)]
	_ = [1]struct{}{}[unsafe.Offsetof(Decision{}.Wait)-unsafe.Offsetof(C.struct_ratecell_decision{}.wait_ns)]
	_ = [1]struct{}{}[unsafe.Offsetof(C.struct_ratecell_decision{}.wait_ns)-unsafe.Offsetof(Decision{}.Wait)]
)

// cDecision lets the library write d in place.
func (d *Decision) cDecision() *C.struct_ratecell_decision {
	return (*C.struct_ratecell_decision)(unsafe.Pointer(d))
}

// saturate maps the library's nanosecond counts of 2^63 and more (they
// read as negative Durations after an in-place write) to Never.
func (d *Decision) saturate() {
	if d.RetryAfter < 0 {
		d.RetryAfter = Never
	}
	if d.ResetAfter < 0 {
		d.ResetAfter = Never
	}
	if d.Wait < 0 {
		d.Wait = Never
	}
}

// Stats is a snapshot of a limiter's counters (struct ratecell_stats). Each
// counter is exact on its own; counters read while other goroutines check
// may be a few events apart.
type Stats struct {
	Checks         uint64 // requests decided (Allowed + Denied)
	Allowed        uint64 // requests admitted (admissible peeks included)
	Denied         uint64 // requests denied (overflow denials included)
	KeysTracked    uint64 // keys with a state in the table now (0 without a table)
	Evictions      uint64 // entries dropped because they were equivalent to fresh
	Overflows      uint64 // new keys that found no free or evictable place, denied or admitted untracked
	Capacity       uint64 // keys the table was sized for (0 without a table)
	BytesAllocated uint64 // bytes of state allocated by New
	EvictedLive    uint64 // live states evicted for new keys (OverflowEvict)
}

// Version is the library's version, e.g. "0.1.0" (ratecell_version).
func Version() string { return C.GoString(C.ratecell_version()) }

// closedBit marks a closed Limiter in Limiter.state; the bits below count
// the calls in flight. 2^62 leaves room for any number of goroutines.
const closedBit = int64(1) << 62

// Limiter is a rate limiter: one shared state (Capacity 0) or one state per
// key. Make it with New; release it with Close. Safe for concurrent use.
//
// A Limiter is a reference to the library's limiter: a copy (cp := *lim)
// is the same limiter, and closing either closes both (later calls on
// either return ErrClosed). The zero Limiter is a closed one.
type Limiter struct {
	core *core
}

// core owns the library's handle; every copy of a Limiter points to the
// one core, so there is one owner whatever the caller copies.
type core struct {
	handle *C.ratecell_limiter
	// state counts calls inside the library, plus closedBit once Close has
	// begun. A call enters with one atomic add and leaves with another;
	// Close waits for the count to drain before freeing the handle, so no
	// call ever reaches freed memory and none needs a lock.
	state   atomic.Int64
	leaky   bool
	limits  []Limit // Options.Limits (NewWith), else nil
	cleanup runtime.Cleanup
}

// New checks cfg and makes a fresh limiter of that one limit (NewWith makes
// the others: several limits, tiers, states from a snapshot, a persisted
// file or a shared region). An invalid field gives an error
// matching the sentinel that names it (ErrInvalidLimit, ...); a table that
// cannot be allocated gives ErrOutOfMemory.
//
// Close the limiter when done. A limiter that becomes unreachable without
// Close is freed by a runtime cleanup as a safety net, but only at the
// garbage collector's pace: with large tables, Close explicitly.
func New(cfg Config) (*Limiter, error) {
	c := cConfig(cfg)
	var handle *C.ratecell_limiter
	if err := statusError("new", C.ratecell_limiter_new(&c, &handle)); err != nil {
		return nil, err
	}
	return wrap(handle, cfg.Algorithm == LeakyBucket), nil
}

// wrap owns a new handle. The cleanup hangs on the core, which lives as
// long as any copy of the Limiter does.
func wrap(handle *C.ratecell_limiter, leaky bool) *Limiter {
	owner := &core{handle: handle, leaky: leaky}
	owner.cleanup = runtime.AddCleanup(owner, func(h *C.ratecell_limiter) { C.ratecell_limiter_free(h) }, handle)
	return &Limiter{core: owner}
}

// cConfig is cfg as the C ABI takes it, defaults filled by ratecell_config_init.
func cConfig(cfg Config) C.struct_ratecell_config {
	var c C.struct_ratecell_config
	period := uint64(0)
	if cfg.Period > 0 {
		period = uint64(cfg.Period)
	}
	C.ratecell_config_init(&c, C.ratecell_algorithm(cfg.Algorithm), C.uint64_t(cfg.Limit), C.uint64_t(period))
	c.burst = C.uint64_t(cfg.Burst)
	if cfg.SubWindows != 0 {
		c.sub_windows = C.uint32_t(cfg.SubWindows)
	}
	c.capacity = C.uint64_t(cfg.Capacity)
	c.overflow = C.uint32_t(cfg.Overflow)
	c.clock = C.uint32_t(cfg.Clock)
	return c
}

// enter admits a call into the library, or refuses it once Close has begun
// (or for a zero Limiter). Every successful enter is paired with exit.
func (l *Limiter) enter() (*C.ratecell_limiter, error) {
	if l == nil || l.core == nil {
		return nil, ErrClosed
	}
	if l.core.state.Add(1)&closedBit != 0 {
		l.core.state.Add(-1)
		return nil, ErrClosed
	}
	return l.core.handle, nil
}

// enterAddr is enter for the hot calls, with the handle as the integer
// the rc_* wrappers of the preamble take: passed as a pointer to an opaque
// struct, it would be checked by cgo on every call (5 to 11 ns of a 40 to
// 90 ns call, BenchmarkKeys1K in bench/), for Go pointers a C allocation
// cannot hold.
func (l *Limiter) enterAddr() (C.uintptr_t, error) {
	h, err := l.enter()
	return C.uintptr_t(uintptr(unsafe.Pointer(h))), err
}

func (l *Limiter) exit() { l.core.state.Add(-1) }

// Close releases the limiter. It is safe to call more than once and from
// several goroutines, also while other goroutines use the limiter: it
// waits for the calls already inside the library (each a few hundred
// nanoseconds; Acquire never waits inside the library) and every call
// that starts afterwards returns ErrClosed. A persisted limiter
// (StatesPersisted) stops its saving thread and saves a last time, and
// Close returns that save's error (ErrSnapshotIO); for any other limiter,
// and on later calls, it returns nil.
func (l *Limiter) Close() error {
	if l == nil || l.core == nil {
		return nil
	}
	c := l.core
	for {
		s := c.state.Load()
		if s&closedBit != 0 {
			return nil // someone else is closing or has closed it
		}
		if c.state.CompareAndSwap(s, s|closedBit) {
			break
		}
	}
	for c.state.Load() != closedBit {
		runtime.Gosched()
	}
	c.cleanup.Stop()
	// The last save of a persisted limiter, reported here: the free
	// returns no status.
	err := statusError("close", C.ratecell_snapshot_stop(c.handle))
	C.ratecell_limiter_free(c.handle)
	c.handle = nil
	return err
}

// Config reads the limiter's configuration back (ratecell_limiter_config):
// as given to New, with SubWindows' default filled in.
func (l *Limiter) Config() (Config, error) {
	h, err := l.enter()
	if err != nil {
		return Config{}, err
	}
	defer l.exit()
	var c C.struct_ratecell_config
	if err := statusError("config", C.ratecell_limiter_config(h, &c)); err != nil {
		return Config{}, err
	}
	return Config{
		Algorithm:  Algorithm(c.algorithm),
		Limit:      uint64(c.limit),
		Period:     time.Duration(c.period_ns),
		Burst:      uint64(c.burst),
		SubWindows: uint32(c.sub_windows),
		Capacity:   uint64(c.capacity),
		Overflow:   Overflow(c.overflow),
		Clock:      Clock(c.clock),
	}, nil
}

// Key is a request's key: a number (Uint64Key, or the zero Key: key 0)
// or a byte string (BytesKey, StringKey). The same bytes always reach the
// same state, and the number k is the same key as its 8 little-endian
// bytes. A limiter of capacity 0 ignores every key. A Key made from bytes
// refers to them without copying: keep them unchanged until the call that
// takes the Key returns (the library keeps no reference).
type Key struct {
	id  uint64
	ptr *byte // nil: the number id; else n bytes at ptr (&emptyKey when n == 0)
	n   int
}

// emptyKey is where an empty byte-string key points: never nil, which
// would name the number key 0.
var emptyKey byte

// Uint64Key is the number key k.
func Uint64Key(k uint64) Key { return Key{id: k} }

// BytesKey is the byte-string key b (the empty key when b is empty).
func BytesKey(b []byte) Key {
	if len(b) == 0 {
		return Key{ptr: &emptyKey}
	}
	return Key{ptr: unsafe.SliceData(b), n: len(b)}
}

// StringKey is the byte-string key of s's bytes, not copied.
func StringKey(s string) Key {
	if len(s) == 0 {
		return Key{ptr: &emptyKey}
	}
	return Key{ptr: unsafe.StringData(s), n: len(s)}
}

// c is the key as rc_* take it: the number, the bytes (NULL for a
// number) and their length.
func (k Key) c() (C.uint64_t, *C.uint8_t, C.size_t) {
	return C.uint64_t(k.id), (*C.uint8_t)(unsafe.Pointer(k.ptr)), C.size_t(k.n)
}

// Request is one request: for which Key, of what cost, at what time, under
// which tier. Its zero value is a request of cost 1 for key 0, now, under
// tier 0; set only what differs:
//
//	d, err := lim.Check(ratecell.Request{Key: ratecell.StringKey(apiKey)})
//	d, err := lim.Check(ratecell.Request{Key: ratecell.Uint64Key(user), Cost: 5, At: t, Tier: paid})
//
// A Request is a plain value: passing it costs no allocation.
type Request struct {
	// Key is the request's key (the zero Key is key 0).
	Key Key
	// Cost is the units asked for; 0 means 1. Set Peek for a request of
	// cost 0.
	Cost uint64
	// Peek asks without taking anything (cost 0): whether a cost-1
	// request would be admitted. Nothing is stored.
	Peek bool
	// At is the request's time in UNIX nanoseconds from the caller's
	// clock; 0 means the limiter's clock (Now). Acquire ignores it.
	At uint64
	// Tier is the key's tier, below Tiers(); 0 (the default tier) on a
	// limiter made without tiers. Another tier gives ErrInvalidTier.
	Tier int
}

// cost is the cost the library is asked for.
func (r *Request) cost() C.uint64_t {
	switch {
	case r.Peek:
		return 0
	case r.Cost == 0:
		return 1
	}
	return C.uint64_t(r.Cost)
}

// at is the request's time as the library takes it.
func at(ns uint64) C.uint64_t {
	if ns == 0 {
		return C.RATECELL_NOW
	}
	return C.uint64_t(ns)
}

// Check decides r and returns its Decision. A denied request is a Decision
// with Allowed false, not an error; an error is ErrClosed, ErrInvalidTier
// for a tier the limiter does not have, or another *Error.
func (l *Limiter) Check(r Request) (Decision, error) {
	var d Decision
	err := l.check(&r, &d)
	return d, err
}

// check has the library write d in place. The exported calls that return a
// Decision are this and a few lines, small enough for Go to inline, so d
// is the caller's own variable. A Decision returned from a call that is
// not inlined (six fields: Go keeps it in memory) is stored by the caller
// field by field and then copied 16 bytes at a time, and a load across two
// smaller stores waits for them to reach the cache: 6 to 9 ns a call,
// measured beside the C ABI floor (BenchmarkKeys1K in bench/).
func (l *Limiter) check(r *Request, d *Decision) error {
	h, err := l.enterAddr()
	if err != nil {
		return err
	}
	id, ptr, n := r.Key.c()
	status := C.rc_check(h, id, ptr, n, cTier(r.Tier), r.cost(), at(r.At), d.cDecision())
	l.exit()
	d.saturate()
	return statusError("check", status)
}

// Allow reports whether one request (cost 1, now, tier 0) for the number
// key is admitted: Check(Request{Key: Uint64Key(key)}).Allowed without the
// rest of the Decision, the fastest call (a limiter of capacity 0 computes
// none of it). A limiter of capacity 0 ignores key.
func (l *Limiter) Allow(key uint64) (bool, error) {
	h, err := l.enterAddr()
	if err != nil {
		return false, err
	}
	// rc_allow returns the answer (1, 0, or a negated status): no request
	// struct, and no Go memory for the library to write.
	answer := C.rc_allow(h, C.uint64_t(key))
	l.exit()
	if answer >= 0 {
		return answer == 1, nil
	}
	return false, statusError("allow", C.ratecell_status(-answer))
}

// checkAtUnguarded is Check of cost 1 for the number key at nowNs without
// the in-flight guard, for the benchmark that measures what the guard
// costs (guard_test.go). The caller must keep l open.
func (l *Limiter) checkAtUnguarded(key, cost, nowNs uint64) Decision {
	var d Decision
	h := C.uintptr_t(uintptr(unsafe.Pointer(l.core.handle)))
	C.rc_check(h, C.uint64_t(key), nil, 0, 0, C.uint64_t(cost), at(nowNs), d.cDecision())
	d.saturate()
	return d
}

// Batch is many requests decided in one call, in order, at one time:
// request i is for Keys[i], of cost Costs[i] (1 each when Costs is nil),
// under tier Tiers[i] (tier 0 each when Tiers is nil), at At (UNIX ns; 0
// means one read of the limiter's clock).
type Batch struct {
	Keys  []uint64
	Costs []uint64
	Tiers []uint32
	At    uint64
}

// CheckBatch decides every request of b in order with one clock read,
// exactly as that many Check calls at one time would, writing allowed[i]
// and, when decisions is not nil, decisions[i].
//
// Costs, Tiers, allowed and decisions must be nil or of len(b.Keys)
// elements (else ErrInvalidLength). allowed may be nil only when
// decisions is not (it is then allocated: pass it to keep the call
// allocation-free). Every tier is checked first: one the limiter does not
// have gives ErrInvalidTier, and nothing is decided.
func (l *Limiter) CheckBatch(b Batch, allowed []bool, decisions []Decision) error {
	const op = "check batch"
	n := len(b.Keys)
	if (b.Tiers != nil && len(b.Tiers) != n) || (b.Costs != nil && len(b.Costs) != n) || (decisions != nil && len(decisions) != n) ||
		(allowed != nil && len(allowed) != n) || (allowed == nil && decisions == nil && n > 0) {
		return &Error{Op: op, Status: StatusInvalidLength}
	}
	if allowed == nil {
		allowed = make([]bool, n)
	}
	h, err := l.enterAddr()
	if err != nil {
		return err
	}
	keysPtr := (*C.uint64_t)(unsafe.Pointer(unsafe.SliceData(b.Keys)))
	costsPtr := (*C.uint64_t)(unsafe.Pointer(unsafe.SliceData(b.Costs)))
	tiersPtr := (*C.uint32_t)(unsafe.Pointer(unsafe.SliceData(b.Tiers)))
	// A Go bool is one byte holding 0 or 1, which is what the library writes.
	allowedPtr := (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(allowed)))
	var decisionsPtr *C.struct_ratecell_decision
	if decisions != nil {
		decisionsPtr = unsafe.SliceData(decisions).cDecision()
	}
	status := C.rc_check_batch(h, keysPtr, costsPtr, tiersPtr, C.size_t(n), at(b.At), allowedPtr, decisionsPtr)
	l.exit()
	if status == C.RATECELL_OK {
		for i := range decisions {
			decisions[i].saturate()
		}
	}
	return statusError(op, status)
}

// Reset forgets key's state: its next request is decided as a fresh
// key's. A limiter of capacity 0 forgets its one shared state. Resetting a
// key that has no state is not an error.
func (l *Limiter) Reset(key Key) error {
	h, err := l.enterAddr()
	if err != nil {
		return err
	}
	id, ptr, n := key.c()
	status := C.rc_reset(h, id, ptr, n)
	l.exit()
	return statusError("reset", status)
}

// Stats is a snapshot of the limiter's counters.
func (l *Limiter) Stats() (Stats, error) {
	h, err := l.enter()
	if err != nil {
		return Stats{}, err
	}
	defer l.exit()
	var s C.struct_ratecell_stats
	if err := statusError("stats", C.ratecell_stats(h, &s)); err != nil {
		return Stats{}, err
	}
	return Stats{
		Checks:         uint64(s.checks),
		Allowed:        uint64(s.allowed),
		Denied:         uint64(s.denied),
		KeysTracked:    uint64(s.keys_tracked),
		Evictions:      uint64(s.evictions),
		Overflows:      uint64(s.overflows),
		Capacity:       uint64(s.capacity),
		BytesAllocated: uint64(s.bytes_allocated),
		EvictedLive:    uint64(s.evicted_live),
	}, nil
}

// Now is the limiter's current time in UNIX nanoseconds: the time Check
// would decide at.
func (l *Limiter) Now() (uint64, error) {
	h, err := l.enter()
	if err != nil {
		return 0, err
	}
	defer l.exit()
	return uint64(C.ratecell_now_ns(h)), nil
}

// stringPtr is the address of s's first byte, or NULL for an empty s (the
// library accepts NULL with length 0 for a name).
func stringPtr(s string) *C.uint8_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.uint8_t)(unsafe.Pointer(unsafe.StringData(s)))
}
