package ratecell

// This file owns several limits checked as one: NewMulti, the per-limit
// answer (MultiDecision) and the limits' names.

/*
#include "ratecell.h"
*/
import "C"

import (
	"unsafe"
)

// MaxLimits is the most limits NewMulti takes (RATECELL_MAX_LIMITS).
const MaxLimits = C.RATECELL_MAX_LIMITS

// Limit is one of several limits checked as one, with an optional Name
// (kept by the Limiter for callers that report which limit denied, such as
// an HTTP layer emitting one header item per limit).
type Limit struct {
	Config
	Name string
}

// MultiDecision is one request's answer from several limits: the combined
// Decision (what Check returns), the index of the limit that denied (-1
// when none did) and every limit's own decision, in the order given to
// NewMulti.
//
// The combined decision is admitted only when every limit admits; its
// Remaining is the least over the limits (Limit that limit's), each on its
// state after the decision (unchanged when denied); RetryAfter the largest
// of the limits' own (Never if any says never); ResetAfter the largest;
// Wait the largest when admitted. A limit that alone would admit a request
// another denies reports Allowed with the Remaining of its unchanged state.
type MultiDecision struct {
	Decision
	DeniedBy int
	Limits   []Decision
}

// NewMulti makes a limiter enforcing every one of limits (1 to MaxLimits,
// any algorithms mixed) as one: a request is admitted only when every limit
// admits it, and only then is anything stored. Every method of Limiter
// works on it and returns the combined decision; CheckEach also returns
// each limit's. All limits share Capacity, Overflow and Clock: a mismatch
// gives the error naming that field (ErrInvalidCapacity, ...); no limits
// or too many give ErrInvalidLength.
func NewMulti(limits []Limit) (*Limiter, error) {
	configs, leaky, err := cConfigs("new_multi", limits)
	if err != nil {
		return nil, err
	}
	var handle *C.ratecell_limiter
	status := C.ratecell_limiter_new_multi(&configs[0], C.size_t(len(configs)), &handle)
	if err := statusError("new_multi", status); err != nil {
		return nil, err
	}
	l := wrap(handle, leaky)
	l.core.limits = append([]Limit(nil), limits...)
	return l, nil
}

// LimitName is the Name given to limit i by NewMulti ("" when none).
func (l *Limiter) LimitName(i int) string {
	if l == nil || l.core == nil || i < 0 || i >= len(l.core.limits) {
		return ""
	}
	return l.core.limits[i].Name
}

// Limits returns the limits the limiter enforces, in order: a copy of
// those given to NewMulti, or the one limit of New (its Config, no Name).
func (l *Limiter) Limits() ([]Limit, error) {
	if l != nil && l.core != nil && l.core.limits != nil {
		return append([]Limit(nil), l.core.limits...), nil
	}
	cfg, err := l.Config()
	if err != nil {
		return nil, err
	}
	return []Limit{{Config: cfg}}, nil
}

// CheckEach is Check with each limit's own decision and the denying index
// (on a limiter made by New: one limit).
func (l *Limiter) CheckEach(key, cost uint64) (MultiDecision, error) {
	return l.checkEach(key, cost, 0, false)
}

// CheckEachAt is CheckEach at the caller's time nowNs (UNIX nanoseconds).
func (l *Limiter) CheckEachAt(key, cost, nowNs uint64) (MultiDecision, error) {
	return l.checkEach(key, cost, nowNs, true)
}

// CheckBytesEach is CheckEach for a byte-string key (as CheckBytes).
func (l *Limiter) CheckBytesEach(key []byte, cost uint64) (MultiDecision, error) {
	return l.checkBytesEach(key, cost, 0, false)
}

// CheckBytesEachAt is CheckBytesEach at the caller's time nowNs (UNIX
// nanoseconds).
func (l *Limiter) CheckBytesEachAt(key []byte, cost, nowNs uint64) (MultiDecision, error) {
	return l.checkBytesEach(key, cost, nowNs, true)
}

func (l *Limiter) checkBytesEach(key []byte, cost, nowNs uint64, at bool) (MultiDecision, error) {
	h, err := l.enter()
	if err != nil {
		return MultiDecision{}, err
	}
	var m C.struct_ratecell_multi_decision
	var status C.ratecell_status
	if at {
		status = C.ratecell_check_bytes_each_at(h, bytesPtr(key), C.size_t(len(key)), C.uint64_t(cost), C.uint64_t(nowNs), &m)
	} else {
		status = C.ratecell_check_bytes_each(h, bytesPtr(key), C.size_t(len(key)), C.uint64_t(cost), &m)
	}
	l.exit()
	return multiDecision(&m, status)
}

func (l *Limiter) checkEach(key, cost, nowNs uint64, at bool) (MultiDecision, error) {
	h, err := l.enter()
	if err != nil {
		return MultiDecision{}, err
	}
	var m C.struct_ratecell_multi_decision
	var status C.ratecell_status
	if at {
		status = C.ratecell_check_each_at(h, C.uint64_t(key), C.uint64_t(cost), C.uint64_t(nowNs), &m)
	} else {
		status = C.ratecell_check_each(h, C.uint64_t(key), C.uint64_t(cost), &m)
	}
	l.exit()
	return multiDecision(&m, status)
}

func multiDecision(m *C.struct_ratecell_multi_decision, status C.ratecell_status) (MultiDecision, error) {
	if err := statusError("check_each", status); err != nil {
		return MultiDecision{}, err
	}
	out := MultiDecision{Decision: goDecision(&m.decision), DeniedBy: -1}
	if m.denied_by != C.RATECELL_NO_LIMIT {
		out.DeniedBy = int(m.denied_by)
	}
	out.Limits = make([]Decision, int(m.count))
	for i := range out.Limits {
		out.Limits[i] = goDecision(&m.limits[i])
	}
	return out, nil
}

// goDecision copies a C decision (Decision has its layout, checked in
// ratecell.go), saturating durations.
func goDecision(c *C.struct_ratecell_decision) Decision {
	d := *(*Decision)(unsafe.Pointer(c))
	d.saturate()
	return d
}
