package ratecell

// This file owns saving a limiter to a snapshot file (docs/SNAPSHOT.md). A
// limiter restored from one, or saved to one periodically, is made by
// NewWith (Options.States).

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
