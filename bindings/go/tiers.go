package ratecell

// This file owns a quota per tier: NewTiered, NewTieredMulti and the
// checks that name a tier.

/*
// The tier checks neither keep nor call back into Go, so their decisions
// stay on the Go stack (without this, cgo moves each to the heap).
#cgo noescape ratecell_check_tier
#cgo nocallback ratecell_check_tier
#cgo noescape ratecell_check_tier_at
#cgo nocallback ratecell_check_tier_at
#cgo noescape ratecell_check_bytes_tier
#cgo nocallback ratecell_check_bytes_tier
#cgo noescape ratecell_check_bytes_tier_at
#cgo nocallback ratecell_check_bytes_tier_at
#cgo noescape ratecell_check_tier_each_at
#cgo nocallback ratecell_check_tier_each_at
#include <stdlib.h>
#include "ratecell.h"
*/
import "C"

import (
	"context"
	"math"
	"unsafe"
)

// MaxTiers is the most tiers NewTiered takes (RATECELL_MAX_TIERS).
const MaxTiers = C.RATECELL_MAX_TIERS

// NewTiered makes one keyed limiter serving several tiers (free, paid,
// internal...), one Config per tier, numbered from 0 in order: CheckTier
// names a key's tier on each check, CheckBatchTier one per request of a
// batch, AcquireTier the tier to wait for. Tier 0 is the default tier:
// every method that names none (Check, Allow, CheckBatch, Acquire, ...) is
// tier 0's.
//
// A key whose tier changes keeps its state, read by its new tier's limits
// at its next check (the carry-over rules of Reconfigure, for that one
// key): what it spent counts against its new quota. Tiers may differ in
// Limit, Burst, and the Period of GCRA, the leaky bucket and the token
// bucket; a tier that differs from tier 0 in what Reconfigure may not
// change gives the error naming that field (ErrInvalidAlgorithm,
// ErrInvalidPeriod, ErrInvalidCapacity, ...). No tiers or more than
// MaxTiers give ErrInvalidLength. See docs/ALGORITHMS.md, "A quota per
// tier".
func NewTiered(tiers []Config) (*Limiter, error) {
	rows := make([][]Config, len(tiers))
	for i := range tiers {
		rows[i] = tiers[i : i+1]
	}
	return NewTieredMulti(rows)
}

// NewTieredMulti is NewTiered for tiers of several limits each (as
// NewMulti): every tier lists the same limits in the same order, with its
// own values (ErrInvalidLength when they are not as many).
func NewTieredMulti(tiers [][]Config) (*Limiter, error) {
	configs, perTier, leaky, err := cTiers("new_tiered", tiers)
	if err != nil {
		return nil, err
	}
	var handle *C.ratecell_limiter
	status := C.ratecell_limiter_new_tiered_multi(&configs[0], C.size_t(perTier), C.size_t(len(tiers)), &handle)
	if err := statusError("new_tiered", status); err != nil {
		return nil, err
	}
	return wrap(handle, leaky), nil
}

// Tiers is how many tiers the limiter serves (1 for one made without
// tiers; 0 once closed).
func (l *Limiter) Tiers() int {
	h, err := l.enter()
	if err != nil {
		return 0
	}
	n := C.ratecell_limiter_tiers(h)
	l.exit()
	return int(n)
}

// cTier is tier as the C ABI takes it; a tier no limiter has (negative, or
// beyond 32 bits) becomes one past any, refused as ErrInvalidTier.
func cTier(tier int) C.uint32_t {
	if tier < 0 || tier > math.MaxUint32 {
		return C.uint32_t(math.MaxUint32)
	}
	return C.uint32_t(tier)
}

// CheckTier decides a request of cost for key under tier's limits, now. A
// tier not below Tiers() gives ErrInvalidTier and checks nothing.
func (l *Limiter) CheckTier(key uint64, tier int, cost uint64) (Decision, error) {
	var d Decision
	h, err := l.enter()
	if err != nil {
		return d, err
	}
	status := C.ratecell_check_tier(h, C.uint64_t(key), cTier(tier), C.uint64_t(cost), d.cDecision())
	l.exit()
	d.saturate()
	return d, statusError("check tier", status)
}

// CheckTierAt is CheckTier at the caller's time nowNs (UNIX nanoseconds).
func (l *Limiter) CheckTierAt(key uint64, tier int, cost, nowNs uint64) (Decision, error) {
	var d Decision
	h, err := l.enter()
	if err != nil {
		return d, err
	}
	status := C.ratecell_check_tier_at(h, C.uint64_t(key), cTier(tier), C.uint64_t(cost), C.uint64_t(nowNs), d.cDecision())
	l.exit()
	d.saturate()
	return d, statusError("check tier", status)
}

// CheckBytesTier is CheckTier for a byte-string key (as CheckBytes).
func (l *Limiter) CheckBytesTier(key []byte, tier int, cost uint64) (Decision, error) {
	var d Decision
	h, err := l.enter()
	if err != nil {
		return d, err
	}
	status := C.ratecell_check_bytes_tier(h, bytesPtr(key), C.size_t(len(key)), cTier(tier), C.uint64_t(cost), d.cDecision())
	l.exit()
	d.saturate()
	return d, statusError("check bytes tier", status)
}

// CheckBytesTierAt is CheckBytesTier at the caller's time nowNs (UNIX
// nanoseconds).
func (l *Limiter) CheckBytesTierAt(key []byte, tier int, cost, nowNs uint64) (Decision, error) {
	var d Decision
	h, err := l.enter()
	if err != nil {
		return d, err
	}
	status := C.ratecell_check_bytes_tier_at(h, bytesPtr(key), C.size_t(len(key)), cTier(tier), C.uint64_t(cost), C.uint64_t(nowNs), d.cDecision())
	l.exit()
	d.saturate()
	return d, statusError("check bytes tier", status)
}

// CheckTierEachAt is CheckTierAt with each limit's own decision and the
// denying index (as CheckEachAt), for tiers of several limits.
func (l *Limiter) CheckTierEachAt(key uint64, tier int, cost, nowNs uint64) (MultiDecision, error) {
	h, err := l.enter()
	if err != nil {
		return MultiDecision{}, err
	}
	var m C.struct_ratecell_multi_decision
	status := C.ratecell_check_tier_each_at(h, C.uint64_t(key), cTier(tier), C.uint64_t(cost), C.uint64_t(nowNs), &m)
	l.exit()
	return multiDecision(&m, status)
}

// CheckBatchTier is CheckBatch with a tier per request: keys[i] under tier
// tiers[i]. tiers must have len(keys) elements (else ErrInvalidLength).
// Every tier is checked first: one not below Tiers() gives ErrInvalidTier,
// and nothing is decided, stored or written.
func (l *Limiter) CheckBatchTier(keys []uint64, tiers []uint32, costs []uint64, allowed []bool, decisions []Decision) error {
	return l.batch(keys, tiers, true, costs, false, 0, allowed, decisions)
}

// CheckBatchTierAt is CheckBatchTier at the caller's time nowNs (UNIX
// nanoseconds).
func (l *Limiter) CheckBatchTierAt(keys []uint64, tiers []uint32, costs []uint64, nowNs uint64, allowed []bool, decisions []Decision) error {
	return l.batch(keys, tiers, true, costs, true, nowNs, allowed, decisions)
}

// AcquireTier is Acquire under tier's limits: it waits until that tier
// admits the request. A tier not below Tiers() gives ErrInvalidTier at
// once, nothing checked.
func (l *Limiter) AcquireTier(ctx context.Context, key uint64, tier int, cost uint64) (Decision, error) {
	return l.acquire(ctx, "acquire tier", cost, func(c uint64) (Decision, error) { return l.CheckTier(key, tier, c) })
}

// AcquireBytesTier is AcquireTier for a byte-string key (see CheckBytes).
func (l *Limiter) AcquireBytesTier(ctx context.Context, key []byte, tier int, cost uint64) (Decision, error) {
	return l.acquire(ctx, "acquire bytes tier", cost, func(c uint64) (Decision, error) { return l.CheckBytesTier(key, tier, c) })
}

// RestoreTiered builds a tiered limiter (as NewTieredMulti makes it) from
// the snapshot file at path: the snapshot must hold the same tiers of the
// same limits in the same order, else ErrSnapshotConfigMismatch before
// anything is allocated (a snapshot of a limiter made without tiers is
// refused so too). Each key keeps the state it had. Restore(path) takes
// the tiers from the file instead.
func RestoreTiered(tiers [][]Config, path string) (*Limiter, error) {
	configs, perTier, leaky, err := cTiers("restore tiered", tiers)
	if err != nil {
		return nil, err
	}
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	var handle *C.ratecell_limiter
	status := C.ratecell_limiter_restore_tiered(&configs[0], C.size_t(perTier), C.size_t(len(tiers)), p, &handle)
	if err := statusError("restore tiered", status); err != nil {
		return nil, err
	}
	return wrap(handle, leaky), nil
}

// cTiers lays tiers out as the C ABI takes them, tier by tier, with the
// number of limits per tier and whether they are leaky buckets;
// ErrInvalidLength for no tiers, too many, or tiers of unequal lengths.
func cTiers(op string, tiers [][]Config) ([]C.struct_ratecell_config, int, bool, error) {
	if len(tiers) == 0 || len(tiers) > MaxTiers {
		return nil, 0, false, statusError(op, C.RATECELL_INVALID_LENGTH)
	}
	perTier := len(tiers[0])
	if perTier == 0 || perTier > MaxLimits {
		return nil, 0, false, statusError(op, C.RATECELL_INVALID_LENGTH)
	}
	configs := make([]C.struct_ratecell_config, 0, perTier*len(tiers))
	leaky := false
	for _, tier := range tiers {
		if len(tier) != perTier {
			return nil, 0, false, statusError(op, C.RATECELL_INVALID_LENGTH)
		}
		for _, c := range tier {
			configs = append(configs, cConfig(c))
			leaky = leaky || c.Algorithm == LeakyBucket
		}
	}
	return configs, perTier, leaky, nil
}
