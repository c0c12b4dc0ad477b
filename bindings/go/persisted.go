package ratecell

// This file owns periodic saving (docs/SNAPSHOT.md, "Periodic saving"): a
// Limiter restored from its file at start and saved there by a background
// thread of the library (ratecell_persisted_open), of one limit, several,
// or tiers.

/*
#include <stdlib.h>
#include "ratecell.h"
*/
import "C"

import (
	"runtime"
	"time"
	"unsafe"
)

// Persisted is a Limiter whose states survive a restart: OpenPersisted
// restores it from its file when the file exists (else makes it fresh)
// and a background thread of the library saves it there every period,
// atomically, so a process killed at any moment leaves the last whole
// snapshot. Every Limiter method works on it. Close stops the saver, saves
// a last time and releases the limiter; closing the embedded Limiter (or
// any copy of it) does the same.
type Persisted struct {
	*Limiter
	persisted *C.ratecell_persisted
	// The last save's error, set by the release (Close of any copy).
	closeErr *error
}

// OpenPersisted is crash-safe limits in one line: the limiter of cfg,
// restored from path if the file exists and saved there every `every` (at
// least 1 ms). It is OpenPersistedWith of one limit, as New is NewWith of
// one.
func OpenPersisted(path string, cfg Config, every time.Duration) (*Persisted, error) {
	return OpenPersistedWith(Options{Limits: []Limit{{Config: cfg}}}, path, every)
}

// OpenPersistedWith opens the limiter o describes (as NewWith makes it:
// several limits, tiers, their clock and names), restored from path if
// the file exists (as RestoreWith restores it), else made fresh, and
// saved there every `every` (at least 1 ms) by a background thread of the
// library (ratecell_persisted_open). A file that exists but cannot be
// restored (damaged, or of another configuration: other limits, other
// tiers, tiers where the file has none: ErrSnapshotConfigMismatch) is an
// error, not a silent fresh start: remove it, or use another path, to
// start afresh. o's errors are NewWith's; o.Shared gives
// ErrSharedUnsupported. With Tiers, CheckTier and the other tier methods
// name a key's tier; the methods that name none are tier 0's.
func OpenPersistedWith(o Options, path string, every time.Duration) (*Persisted, error) {
	const op = "open_persisted"
	c, err := o.c(op)
	if err != nil {
		return nil, err
	}
	defer c.free()
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	var persisted *C.ratecell_persisted
	if err := statusError(op, c.persistedOpen(p, everyNs(every), &persisted)); err != nil {
		return nil, err
	}
	return adoptPersisted(persisted, c), nil
}

// everyNs is a saving period as the C ABI takes it (a negative one is 0,
// which the library raises to 1 ms).
func everyNs(every time.Duration) C.uint64_t {
	if every > 0 {
		return C.uint64_t(every)
	}
	return 0
}

// adoptPersisted wraps a persisted handle opened with the options c: its
// limiter is used as any other, and releasing it (Close of any copy, or
// the cleanup) closes the persisted handle, saving a last time.
func adoptPersisted(persisted *C.ratecell_persisted, c cOptions) *Persisted {
	var handle *C.ratecell_limiter
	// Cannot fail: both pointers are valid.
	C.ratecell_persisted_limiter(persisted, &handle)
	owner := &core{handle: handle, leaky: c.leaky}
	c.name(owner)
	closeErr := new(error)
	owner.free = func() {
		*closeErr = statusError("close_persisted", C.ratecell_persisted_close(persisted))
	}
	owner.cleanup = runtime.AddCleanup(owner, func(p *C.ratecell_persisted) { C.ratecell_persisted_close(p) }, persisted)
	return &Persisted{Limiter: &Limiter{core: owner}, persisted: persisted, closeErr: closeErr}
}

// SaveNow saves in the calling goroutine (the periodic saves go on).
func (p *Persisted) SaveNow() error {
	if p == nil || p.Limiter == nil {
		return ErrClosed
	}
	if _, err := p.enter(); err != nil {
		return err
	}
	defer p.exit()
	return statusError("save", C.ratecell_persisted_save(p.persisted))
}

// Close stops the periodic saves (joining the library's thread), saves a
// last time and releases the limiter; it returns that save's error
// (ErrSnapshotIO). It waits for calls already inside the library, like
// Limiter.Close, and is safe to call more than once: later calls return
// nil.
func (p *Persisted) Close() error {
	if p == nil || p.Limiter == nil {
		return nil
	}
	p.Limiter.Close()
	err := *p.closeErr
	*p.closeErr = nil
	return err
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
