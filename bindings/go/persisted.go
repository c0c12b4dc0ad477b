package ratecell

// This file owns periodic saving (docs/SNAPSHOT.md, "Periodic saving"): a
// Limiter restored from its file at start and saved there by a background
// thread of the library (ratecell_persisted_*), of one limit, several, or
// tiers; and RestoreMulti.

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
// least 1 ms). A file that exists but cannot be restored (damaged, or of
// another configuration: ErrSnapshotConfigMismatch) is an error, not a
// silent fresh start: remove it, or use another path, to start afresh.
func OpenPersisted(path string, cfg Config, every time.Duration) (*Persisted, error) {
	return OpenPersistedMulti(path, []Limit{{Config: cfg}}, every)
}

// OpenPersistedMulti is OpenPersisted for several limits checked as one
// (NewMulti): a file saved with other limits, or another number of them,
// gives ErrSnapshotConfigMismatch.
func OpenPersistedMulti(path string, limits []Limit, every time.Duration) (*Persisted, error) {
	configs, leaky, err := cConfigs("open_persisted", limits)
	if err != nil {
		return nil, err
	}
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	var persisted *C.ratecell_persisted
	status := C.ratecell_persisted_open_multi(&configs[0], C.size_t(len(configs)), p, everyNs(every), &persisted)
	if err := statusError("open_persisted", status); err != nil {
		return nil, err
	}
	var names []Limit
	if len(limits) > 1 {
		names = append([]Limit(nil), limits...)
	}
	return adoptPersisted(persisted, leaky, names), nil
}

// OpenPersistedTiered is OpenPersisted for a tiered limiter (NewTiered,
// one Config per tier): restored from path with every tier if the file
// exists, else made fresh, and saved there every `every` with every tier.
// A file saved with other tiers, another number of them, or by a limiter
// made without tiers gives ErrSnapshotConfigMismatch. CheckTier and the
// other tier methods name a key's tier; the methods that name none are
// tier 0's.
func OpenPersistedTiered(path string, tiers []Config, every time.Duration) (*Persisted, error) {
	rows := make([][]Config, len(tiers))
	for i := range tiers {
		rows[i] = tiers[i : i+1]
	}
	return OpenPersistedTieredMulti(path, rows, every)
}

// OpenPersistedTieredMulti is OpenPersistedTiered for tiers of several
// limits each (NewTieredMulti).
func OpenPersistedTieredMulti(path string, tiers [][]Config, every time.Duration) (*Persisted, error) {
	configs, perTier, leaky, err := cTiers("open_persisted_tiered", tiers)
	if err != nil {
		return nil, err
	}
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	var persisted *C.ratecell_persisted
	status := C.ratecell_persisted_open_tiered(&configs[0], C.size_t(perTier), C.size_t(len(tiers)), p, everyNs(every), &persisted)
	if err := statusError("open_persisted_tiered", status); err != nil {
		return nil, err
	}
	return adoptPersisted(persisted, leaky, nil), nil
}

// everyNs is a saving period as the C ABI takes it (a negative one is 0,
// which the library raises to 1 ms).
func everyNs(every time.Duration) C.uint64_t {
	if every > 0 {
		return C.uint64_t(every)
	}
	return 0
}

// adoptPersisted wraps an opened persisted handle: its limiter is used as
// any other, and releasing it (Close of any copy, or the cleanup) closes
// the persisted handle, saving a last time. limits are the names of
// several limits, or nil.
func adoptPersisted(persisted *C.ratecell_persisted, leaky bool, limits []Limit) *Persisted {
	var handle *C.ratecell_limiter
	// Cannot fail: both pointers are valid.
	C.ratecell_persisted_limiter(persisted, &handle)
	owner := &core{handle: handle, leaky: leaky, limits: limits}
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

// RestoreMulti builds the limiter of several limits (NewMulti) from the
// snapshot file at path: the file must hold the same limits in the same
// order, else ErrSnapshotConfigMismatch (before anything is allocated).
// Names are not saved: they are taken from limits.
func RestoreMulti(limits []Limit, path string) (*Limiter, error) {
	configs, leaky, err := cConfigs("restore", limits)
	if err != nil {
		return nil, err
	}
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	var handle *C.ratecell_limiter
	status := C.ratecell_limiter_restore_multi(&configs[0], C.size_t(len(configs)), p, &handle)
	if err := statusError("restore", status); err != nil {
		return nil, err
	}
	l := wrap(handle, leaky)
	l.core.limits = append([]Limit(nil), limits...)
	return l, nil
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
