package ratecell

// This file owns a quota per tier: the tiers a limiter serves and the
// snapshot of a tiered limiter. NewWith makes one (Options.Tiers); every
// request names its tier (Request.Tier, Batch.Tiers).

/*
#include <stdlib.h>
#include "ratecell.h"
*/
import "C"

import (
	"math"
	"unsafe"
)

// MaxTiers is the most tiers one limiter serves (RATECELL_MAX_TIERS).
const MaxTiers = C.RATECELL_MAX_TIERS

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

// RestoreTiered builds a tiered limiter (as NewWith with Options.Tiers makes it) from
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
