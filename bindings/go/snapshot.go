package ratecell

// This file owns snapshots (docs/SNAPSHOT.md): saving a limiter to a file
// and restoring one from a file.

/*
#include <stdlib.h>
#include "ratecell.h"
*/
import "C"

import "unsafe"

// Save writes a snapshot of the limiter (its configuration and every live
// state, judged at the limiter's clock) to path, atomically: a temporary
// file in the same directory, fsync, rename. Other goroutines may keep
// checking meanwhile.
func (l *Limiter) Save(path string) error {
	h, err := l.enter()
	if err != nil {
		return err
	}
	defer l.exit()
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	return statusError("save", C.ratecell_snapshot_save(h, p))
}

// SaveAt is Save judging which states are live at nowNs (UNIX ns), for
// limiters driven by the At calls.
func (l *Limiter) SaveAt(path string, nowNs uint64) error {
	h, err := l.enter()
	if err != nil {
		return err
	}
	defer l.exit()
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	return statusError("save", C.ratecell_snapshot_save_at(h, p, C.uint64_t(nowNs)))
}

// Restore builds a limiter from the snapshot file at path, with the
// configuration saved in it (every limit, every tier; it sizes the table:
// restore this way only files you would take a configuration from), on
// the TSC clock. Errors match ErrSnapshotNotFound, ErrSnapshotDamaged,
// ErrSnapshotVersion, ... RestoreWith takes the configuration from the
// caller instead.
func Restore(path string) (*Limiter, error) {
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	var handle *C.ratecell_limiter
	if err := statusError("restore", C.ratecell_limiter_restore(nil, p, &handle)); err != nil {
		return nil, err
	}
	var c C.struct_ratecell_config
	C.ratecell_limiter_config(handle, &c)
	return wrap(handle, Algorithm(c.algorithm) == LeakyBucket), nil
}

// RestoreWith builds the limiter o describes (as NewWith makes it: several
// limits, tiers, their clock and names) holding the states saved in the
// snapshot file at path (ratecell_limiter_restore). The snapshot must
// hold the same limits in the same order, or the same tiers of them, else
// ErrSnapshotConfigMismatch before anything is allocated (a snapshot of a
// limiter made without tiers is no tiered limiter's, nor the reverse); the
// overflow policy and the clock are o's to choose. Names are not saved:
// they are taken from o. o's errors are NewWith's; o.Shared gives
// ErrSharedUnsupported. Each key keeps the state it had.
func RestoreWith(o Options, path string) (*Limiter, error) {
	const op = "restore"
	c, err := o.c(op)
	if err != nil {
		return nil, err
	}
	defer c.free()
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	var handle *C.ratecell_limiter
	if err := statusError(op, c.restore(p, &handle)); err != nil {
		return nil, err
	}
	return c.wrap(handle), nil
}
