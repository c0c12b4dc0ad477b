package ratecell

// This file owns a quota per tier: the tiers a limiter serves and their
// layout for the C ABI. NewWith makes one (Options.Tiers), fresh or
// restored; every request names its tier (Request.Tier, Batch.Tiers).

/*
#include <stdlib.h>
#include "ratecell.h"
*/
import "C"

import "math"

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
