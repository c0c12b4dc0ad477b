package ratecell

// This file owns live reconfiguration: Reconfigure.

/*
#include "ratecell.h"
*/
import "C"

// Reconfigure changes the limiter's limits while other goroutines keep
// checking, keeping every state: one Config per limit, in the order given
// to New (one) or NewMulti. Each check sees the old limits or the new
// ones, never a mix; what a state keeps follows each algorithm's
// carry-over rule (docs/ALGORITHMS.md, "Live reconfiguration"): limit and
// burst changes keep what was spent. A change with no carry-over (another
// algorithm, a window algorithm's period, a count width, the capacity,
// overflow or clock, a shared region) gives ErrReconfigureRefused, an
// invalid field its ErrInvalid* error; nothing changes then. Names given to
// NewMulti are kept.
func (l *Limiter) Reconfigure(limits []Config) error {
	if len(limits) == 0 || len(limits) > MaxLimits {
		return statusError("reconfigure", C.RATECELL_INVALID_LENGTH)
	}
	configs := make([]C.struct_ratecell_config, len(limits))
	for i, c := range limits {
		configs[i] = cConfig(c)
	}
	h, err := l.enter()
	if err != nil {
		return err
	}
	status := C.ratecell_limiter_reconfigure(h, &configs[0], C.size_t(len(configs)))
	l.exit()
	return statusError("reconfigure", status)
}
