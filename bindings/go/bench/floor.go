// Package bench holds the benchmarks of the Go binding against its peers
// (bench_test.go) and, here, the physical floors they are read against,
// measured in the same run: an empty cgo call, and one cgo call straight
// into the C ABI (no binding in between), so that what the binding adds
// and what the library's check costs are told apart.
package bench

/*
#cgo CFLAGS: -I${SRCDIR}/../../../include
#cgo LDFLAGS: -L${SRCDIR}/../../../target/release -l:libratecell.a -lgcc_s -lutil -lrt -lpthread -lm -ldl
#cgo nocallback bench_empty
#cgo nocallback bench_allow
#cgo nocallback bench_check
#cgo nocallback bench_check_into
#cgo noescape bench_check_into
#cgo nocallback bench_new
#cgo nocallback bench_free
#include <stdint.h>
#include <time.h>
#include "ratecell.h"

// The shape of bench_allow (a handle and a key in, an int out),
// doing nothing: what any cgo call costs before the library does any work.
static int bench_empty(uintptr_t limiter, uint64_t key) { (void)limiter; return (int)(key & 1); }

// A GCRA limiter of 10^9 per second (admits every benchmark request), with
// a table of capacity keys (0: one shared state), on the default clock; 0
// if it cannot be made. The handle crosses into Go as an integer, as in
// the binding, so that cgo does not check it for Go pointers on each call.
static uintptr_t bench_new(uint64_t capacity) {
	struct ratecell_config cfg;
	ratecell_config_init(&cfg, RATECELL_ALGORITHM_GCRA, 1000000000u, 1000000000u);
	cfg.capacity = capacity;
	ratecell_limiter *h = NULL;
	return ratecell_limiter_new(&cfg, &h) == RATECELL_OK ? (uintptr_t)h : 0;
}
static void bench_free(uintptr_t h) { ratecell_limiter_free((ratecell_limiter *)h); }

// The library's Allow and Check called from C, one per cgo call (Check
// also into a caller's decision).
static int bench_allow(uintptr_t h, uint64_t key) {
	return ratecell_allow((const ratecell_limiter *)h, key) == RATECELL_OK;
}
static ratecell_status bench_check_into(uintptr_t h, uint64_t key, struct ratecell_decision *out) {
	struct ratecell_request r;
	ratecell_request_init(&r);
	r.key_id = key;
	return ratecell_check((const ratecell_limiter *)h, &r, out);
}
static int bench_check(uintptr_t h, uint64_t key) {
	struct ratecell_decision d;
	return bench_check_into(h, key, &d) == RATECELL_OK && d.allowed;
}

// This thread's CPU time in ns: what the benchmarks report beside wall
// time, so that time slices other jobs take on a shared machine do not
// count (as criterion's ThreadCpuTime on the Rust side).
static uint64_t bench_thread_cpu_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
*/
import "C"

import (
	"errors"
	"unsafe"
)

// EmptyCall makes one cgo call that does nothing.
func EmptyCall(p uintptr, key uint64) int {
	return int(C.bench_empty(C.uintptr_t(p), C.uint64_t(key)))
}

// Direct is a limiter of the C ABI used with no binding: the floor of any
// cgo binding's call (one cgo call plus the library's work).
type Direct struct{ h C.uintptr_t }

// NewDirect makes a GCRA limiter of 10^9 per second with a table of
// capacity keys (0: one shared state), on the default (TSC) clock.
func NewDirect(capacity uint64) (Direct, error) {
	h := C.bench_new(C.uint64_t(capacity))
	if h == 0 {
		return Direct{}, errors.New("bench: ratecell_limiter_new failed")
	}
	return Direct{h}, nil
}

// Allow is one cgo call of ratecell_allow (its answer as the int): 1
// admitted, 0 denied.
func (d Direct) Allow(key uint64) int { return int(C.bench_allow(d.h, C.uint64_t(key))) }

// Check is one cgo call of ratecell_check at cost 1: whether admitted.
func (d Direct) Check(key uint64) bool { return C.bench_check(d.h, C.uint64_t(key)) != 0 }

// Decision has the layout of struct ratecell_decision.
type Decision struct {
	Allowed                                        bool
	Limit, Remaining, RetryAfter, ResetAfter, Wait uint64
}

// CheckInto is one cgo call of ratecell_check at cost 1 writing the whole
// decision to *out, as a binding that returns it must.
func (d Direct) CheckInto(key uint64, out *Decision) bool {
	return C.bench_check_into(d.h, C.uint64_t(key), (*C.struct_ratecell_decision)(unsafe.Pointer(out))) == C.RATECELL_OK
}

// Close frees the limiter.
func (d Direct) Close() { C.bench_free(d.h) }

// ThreadCPUNs is the calling thread's CPU time in ns (lock the goroutine
// to its thread around what is measured).
func ThreadCPUNs() uint64 { return uint64(C.bench_thread_cpu_ns()) }
