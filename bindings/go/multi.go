package ratecell

// This file owns the limiters New does not make (NewWith: several limits
// checked as one, tiers, states from a snapshot, a persisted file or a
// shared region), Options as the C ABI takes them (one ratecell_options),
// the per-limit answer (MultiDecision) and the limits' names.

/*
#cgo noescape rc_build
#cgo nocallback rc_build
#cgo noescape rc_check_each
#cgo nocallback rc_check_each
#include <stdlib.h>
#include "ratecell.h"

// The options, built here: Go memory handed to C may not hold Go pointers,
// and a ratecell_options holding the Go slice of configs would.
static inline ratecell_status rc_build(const struct ratecell_config *configs, size_t n_limits, size_t n_tiers, uint32_t states, const char *path, uint64_t save_every_ns, const char *shared_path, uint32_t shared_mode, ratecell_limiter **out) {
	struct ratecell_options o;
	ratecell_options_init(&o);
	o.configs = configs;
	o.n_limits = n_limits;
	o.n_tiers = n_tiers;
	o.states = states;
	o.path = path;
	o.save_every_ns = save_every_ns;
	o.shared_path = shared_path;
	o.shared_mode = shared_mode;
	return ratecell_limiter_build(&o, out);
}

// As rc_check (ratecell.go), for ratecell_check_each.
static inline ratecell_status rc_check_each(uintptr_t h, uint64_t id, const uint8_t *bytes, size_t n, uint32_t tier, uint64_t cost, uint64_t at_ns, struct ratecell_multi_decision *out) {
	struct ratecell_request r = {sizeof r, tier, id, bytes, bytes ? n : 0, cost, at_ns};
	return ratecell_check_each((const ratecell_limiter *)h, &r, out);
}
*/
import "C"

import (
	"time"
	"unsafe"
)

// MaxLimits is the most limits one limiter checks (RATECELL_MAX_LIMITS).
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
// Options.Limits.
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

// States says where a limiter's states come from (Options.States, the C
// ABI's ratecell_states; docs/SPEC.md §2).
type States uint32

const (
	// StatesFresh: every key starts unused (the default).
	StatesFresh States = C.RATECELL_STATES_FRESH
	// StatesSnapshot: the states saved in the snapshot file Options.Path
	// (ErrSnapshotNotFound when there is none), each key with the state it
	// had.
	StatesSnapshot States = C.RATECELL_STATES_SNAPSHOT
	// StatesPersisted: the states saved in Options.Path if the file
	// exists, else fresh; a background thread of the library then saves
	// the limiter there every Options.SaveEvery (at least 1 ms),
	// atomically, so a process killed at any moment leaves the last whole
	// snapshot. Close saves a last time and returns that save's error.
	StatesPersisted States = C.RATECELL_STATES_PERSISTED
	// StatesShared: the table lies in the region Options.Shared, shared by
	// every process on the machine that opens it, in any language: one
	// limit across processes. A new region is filled from the snapshot
	// file Options.Path when it is set and the file exists.
	StatesShared States = C.RATECELL_STATES_SHARED
)

// Options describes the limiter NewWith makes: Limits, or Tiers, and where
// its states come from. The zero value of every optional field is its
// default.
type Options struct {
	// Limits are checked as one (1 to MaxLimits, any algorithms mixed): a
	// request is admitted only when every limit admits it, and only then
	// is anything stored. Every check returns the combined decision;
	// CheckEach also returns each limit's. All limits share Capacity,
	// Overflow and Clock: a mismatch gives the error naming that field
	// (ErrInvalidCapacity, ...). Leave it empty when Tiers is set, and
	// leave both empty to take a snapshot's own (StatesSnapshot,
	// StatesPersisted when the file exists: the saved configuration then
	// sizes the table, so take it only from files you would take a
	// configuration from).
	Limits []Limit
	// Tiers (1 to MaxTiers) make a keyed limiter serving a quota per tier
	// (free, paid, internal...): tier t's limits are Tiers[t], the same
	// limits in the same order in every tier, with their own values. Each
	// request names its key's tier (Request.Tier, 0 by default). A key
	// whose tier changes keeps its state, read by its new tier's limits
	// (docs/ALGORITHMS.md, "A quota per tier"), so tiers may differ in
	// limit, burst and the period of GCRA, LeakyBucket and TokenBucket,
	// not in algorithm, a window's period, SubWindows, a SlidingLog's
	// limit, Capacity, Overflow or Clock (the error names the field).
	Tiers [][]Config
	// States says where the states come from (StatesFresh by default). A
	// snapshot must hold the same limits in the same order, or the same
	// tiers of them, else ErrSnapshotConfigMismatch before anything is
	// allocated (a snapshot of a limiter made without tiers is no tiered
	// limiter's, nor the reverse); the overflow policy and the clock are
	// the options'. Names are not saved: they are taken from Limits. A
	// field these states do not read, set, gives ErrInvalidStates.
	States States
	// Path is the snapshot file of StatesSnapshot and StatesPersisted, and
	// the one that fills a new region of StatesShared (optional there).
	Path string
	// SaveEvery is StatesPersisted's period between saves (at least 1 ms).
	SaveEvery time.Duration
	// Shared is StatesShared's region file (a bare name is placed under
	// /dev/shm). Needs one limit of Capacity >= 1 and a word algorithm, no
	// tiers (ErrSharedUnsupported otherwise).
	Shared string
	// SharedMode is the permission bits of a region NewWith creates (0
	// means 0600). An existing region keeps its mode.
	SharedMode uint32
}

// NewWith makes the limiter o describes (ratecell_limiter_build). No
// limits (but to take a snapshot's), too many, both Limits and Tiers, or
// tiers of unequal lengths give ErrInvalidLength; an invalid field, the
// error naming it; states that cannot be had, the snapshot's or the
// region's error (ErrSnapshotConfigMismatch, ErrSharedUnsupported, ...).
// Close the limiter when done, as one made by New.
func NewWith(o Options) (*Limiter, error) {
	const op = "new"
	c, err := o.c(op)
	if err != nil {
		return nil, err
	}
	defer c.free()
	var handle *C.ratecell_limiter
	if err := statusError(op, c.build(&handle)); err != nil {
		return nil, err
	}
	return c.wrap(handle), nil
}

// cOptions is Options as the C ABI takes them.
type cOptions struct {
	configs   []C.struct_ratecell_config
	perTier   C.size_t
	tiers     C.size_t
	states    C.uint32_t
	path      *C.char
	saveEvery C.uint64_t
	shared    *C.char
	mode      C.uint32_t
	leaky     bool
	names     []Limit
}

// c lays o out as the C ABI takes it; free releases the paths. Too many
// limits, both Limits and Tiers, or tiers of unequal lengths give
// ErrInvalidLength; so do no limits, but with states from a snapshot
// (which then gives them).
func (o Options) c(op string) (cOptions, error) {
	var c cOptions
	var err error
	fromFile := o.States == StatesSnapshot || o.States == StatesPersisted
	switch {
	case len(o.Tiers) > 0 && len(o.Limits) > 0:
		return c, &Error{Op: op, Status: StatusInvalidLength}
	case len(o.Tiers) > 0:
		var perTier int
		c.configs, perTier, c.leaky, err = cTiers(op, o.Tiers)
		c.perTier, c.tiers = C.size_t(perTier), C.size_t(len(o.Tiers))
	case len(o.Limits) == 0 && fromFile:
		// The snapshot's own limits.
	default:
		c.configs, c.leaky, err = cConfigs(op, o.Limits)
		c.perTier = C.size_t(len(c.configs))
		c.names = o.Limits
	}
	if err != nil {
		return c, err
	}
	c.states = C.uint32_t(o.States)
	if o.Path != "" {
		c.path = C.CString(o.Path)
	}
	if o.SaveEvery > 0 {
		c.saveEvery = C.uint64_t(o.SaveEvery)
	}
	if o.Shared != "" {
		c.shared = C.CString(o.Shared)
	}
	c.mode = C.uint32_t(o.SharedMode)
	return c, nil
}

func (c cOptions) free() {
	for _, p := range []*C.char{c.path, c.shared} {
		if p != nil {
			C.free(unsafe.Pointer(p))
		}
	}
}

// wrap wraps a handle made of these options, with their limits' names. A
// limiter of a snapshot's own limits learns from them whether it is a
// leaky bucket.
func (c cOptions) wrap(handle *C.ratecell_limiter) *Limiter {
	leaky := c.leaky
	if len(c.configs) == 0 {
		var first C.struct_ratecell_config
		C.ratecell_limiter_config(handle, &first)
		leaky = Algorithm(first.algorithm) == LeakyBucket
	}
	l := wrap(handle, leaky)
	c.name(l.core)
	return l
}

// build passes these options to ratecell_limiter_build, through the
// preamble's helper (cgo gives other files no access to a preamble's
// functions).
func (c cOptions) build(out **C.ratecell_limiter) C.ratecell_status {
	var configs *C.struct_ratecell_config
	if len(c.configs) > 0 {
		configs = &c.configs[0]
	}
	return C.rc_build(configs, c.perTier, c.tiers, c.states, c.path, c.saveEvery, c.shared, c.mode, out)
}

// name gives a limiter made of these options their limits' names.
func (c cOptions) name(core *core) {
	if len(c.names) > 0 {
		core.limits = append([]Limit(nil), c.names...)
	}
}

// LimitName is the Name given to limit i in Options.Limits ("" when none).
func (l *Limiter) LimitName(i int) string {
	if l == nil || l.core == nil || i < 0 || i >= len(l.core.limits) {
		return ""
	}
	return l.core.limits[i].Name
}

// Limits returns the limits the limiter enforces, in order: a copy of
// Options.Limits, or the one limit of New (its Config, no Name).
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
// (on a limiter of one limit: one).
func (l *Limiter) CheckEach(r Request) (MultiDecision, error) {
	h, err := l.enterAddr()
	if err != nil {
		return MultiDecision{}, err
	}
	var m C.struct_ratecell_multi_decision
	id, ptr, n := r.Key.c()
	status := C.rc_check_each(h, id, ptr, n, cTier(r.Tier), r.cost(), at(r.At), &m)
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

// cConfigs is limits as the C ABI takes them, and
// whether any is a leaky bucket; 0 or more than MaxLimits limits give
// ErrInvalidLength.
func cConfigs(op string, limits []Limit) ([]C.struct_ratecell_config, bool, error) {
	if len(limits) == 0 || len(limits) > MaxLimits {
		return nil, false, statusError(op, C.RATECELL_INVALID_LENGTH)
	}
	configs := make([]C.struct_ratecell_config, len(limits))
	leaky := false
	for i, lim := range limits {
		configs[i] = cConfig(lim.Config)
		leaky = leaky || lim.Algorithm == LeakyBucket
	}
	return configs, leaky, nil
}
