// Package bench holds the benchmarks of the Go binding against its peers
// (bench_test.go) and, here, the physical floor they are read against: the
// cost of an empty cgo call, measured in the same run.
package bench

/*
#cgo nocallback bench_empty
#include <stdint.h>

// The shape of ratecell_allow_key (a pointer and a key in, an int out),
// doing nothing: what any cgo call costs before the library does any work.
static int bench_empty(void *limiter, uint64_t key) { (void)limiter; return (int)(key & 1); }
*/
import "C"

import "unsafe"

// EmptyCall makes one cgo call that does nothing.
func EmptyCall(p unsafe.Pointer, key uint64) int {
	return int(C.bench_empty(p, C.uint64_t(key)))
}
