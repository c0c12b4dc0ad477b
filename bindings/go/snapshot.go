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
// configuration saved in it (which sizes the table: restore this way only
// files you would take a configuration from). Errors match
// ErrSnapshotNotFound, ErrSnapshotDamaged, ErrSnapshotVersion, ...
func Restore(path string) (*Limiter, error) {
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	var handle *C.ratecell_limiter
	if err := statusError("restore", C.ratecell_limiter_restore(p, &handle)); err != nil {
		return nil, err
	}
	var c C.struct_ratecell_config
	C.ratecell_limiter_config(handle, &c)
	return wrap(handle, Algorithm(c.algorithm) == LeakyBucket), nil
}

// RestoreConfig builds a limiter of cfg from the snapshot file at path; a
// snapshot of another configuration gives ErrSnapshotConfigMismatch before
// anything is allocated (the overflow policy and the clock are cfg's).
func RestoreConfig(cfg Config, path string) (*Limiter, error) {
	c := cConfig(cfg)
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	var handle *C.ratecell_limiter
	if err := statusError("restore", C.ratecell_limiter_restore_config(&c, p, &handle)); err != nil {
		return nil, err
	}
	return wrap(handle, cfg.Algorithm == LeakyBucket), nil
}
