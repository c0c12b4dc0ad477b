package ratecell

// This file owns the error model: the C ABI's statuses as a Go type, the
// *Error value every failed call returns, and the sentinels that
// errors.Is matches against it.

/*
#include "ratecell.h"
*/
import "C"

import (
	"errors"
	"strconv"
)

// Status is a ratecell_status from the C ABI. StatusOK is 0; every other
// value but StatusDenied names one reason for failure. Values are stable
// (new ones are only added at the end).
type Status uint32

// The statuses of include/ratecell.h, with the same numbers.
const (
	StatusOK                Status = C.RATECELL_OK
	StatusNullArgument      Status = C.RATECELL_NULL_ARGUMENT
	StatusInvalidAlgorithm  Status = C.RATECELL_INVALID_ALGORITHM
	StatusInvalidLimit      Status = C.RATECELL_INVALID_LIMIT
	StatusInvalidPeriodNs   Status = C.RATECELL_INVALID_PERIOD_NS
	StatusInvalidBurst      Status = C.RATECELL_INVALID_BURST
	StatusInvalidSubWindows Status = C.RATECELL_INVALID_SUB_WINDOWS
	StatusInvalidCapacity   Status = C.RATECELL_INVALID_CAPACITY
	StatusInvalidOverflow   Status = C.RATECELL_INVALID_OVERFLOW
	StatusInvalidClock      Status = C.RATECELL_INVALID_CLOCK
	StatusUnknownAlgorithm  Status = C.RATECELL_UNKNOWN_ALGORITHM
	StatusOutOfMemory       Status = C.RATECELL_OUT_OF_MEMORY
	StatusTimedOut          Status = C.RATECELL_TIMED_OUT
	StatusCostExceedsLimit  Status = C.RATECELL_COST_EXCEEDS_LIMIT
	StatusInvalidLength     Status = C.RATECELL_INVALID_LENGTH
	StatusPanic             Status = C.RATECELL_PANIC
	// Snapshot statuses (docs/SNAPSHOT.md).
	StatusSnapshotIO             Status = C.RATECELL_SNAPSHOT_IO
	StatusSnapshotNotFound       Status = C.RATECELL_SNAPSHOT_NOT_FOUND
	StatusSnapshotDamaged        Status = C.RATECELL_SNAPSHOT_DAMAGED
	StatusSnapshotVersion        Status = C.RATECELL_SNAPSHOT_VERSION
	StatusSnapshotConfigMismatch Status = C.RATECELL_SNAPSHOT_CONFIG_MISMATCH
	StatusSnapshotSeveralLimits  Status = C.RATECELL_SNAPSHOT_SEVERAL_LIMITS
	// Shared-region statuses (docs/SHARED.md).
	StatusSharedIO             Status = C.RATECELL_SHARED_IO
	StatusSharedNotARegion     Status = C.RATECELL_SHARED_NOT_A_REGION
	StatusSharedTruncated      Status = C.RATECELL_SHARED_TRUNCATED
	StatusSharedVersion        Status = C.RATECELL_SHARED_VERSION
	StatusSharedConfigMismatch Status = C.RATECELL_SHARED_CONFIG_MISMATCH
	StatusSharedStale          Status = C.RATECELL_SHARED_STALE
	StatusSharedUnsupported    Status = C.RATECELL_SHARED_UNSUPPORTED
	// Reconfigure refused: no carry-over for this change (Reconfigure).
	StatusReconfigureRefused Status = C.RATECELL_RECONFIGURE_REFUSED
	// A tier not below the limiter's number of tiers (CheckTier).
	StatusInvalidTier Status = C.RATECELL_INVALID_TIER
	// The lease protocol's statuses are in lease.go.
	// Options.States out of range, or a field those states do not read
	// set (NewWith).
	StatusInvalidStates Status = C.RATECELL_INVALID_STATES
	// Not a failure: the C ABI's yes/no call's answer for a request not
	// admitted, which Allow returns as false.
	StatusDenied Status = C.RATECELL_DENIED
	lastStatus          = StatusDenied
)

var statusNames = [...]string{
	"OK", "NULL_ARGUMENT", "INVALID_ALGORITHM", "INVALID_LIMIT", "INVALID_PERIOD_NS",
	"INVALID_BURST", "INVALID_SUB_WINDOWS", "INVALID_CAPACITY", "INVALID_OVERFLOW",
	"INVALID_CLOCK", "UNKNOWN_ALGORITHM", "OUT_OF_MEMORY", "TIMED_OUT",
	"COST_EXCEEDS_LIMIT", "INVALID_LENGTH", "PANIC",
	"SNAPSHOT_IO", "SNAPSHOT_NOT_FOUND", "SNAPSHOT_DAMAGED", "SNAPSHOT_VERSION",
	"SNAPSHOT_CONFIG_MISMATCH", "SNAPSHOT_SEVERAL_LIMITS",
	"SHARED_IO", "SHARED_NOT_A_REGION", "SHARED_TRUNCATED", "SHARED_VERSION",
	"SHARED_CONFIG_MISMATCH", "SHARED_STALE", "SHARED_UNSUPPORTED",
	"RECONFIGURE_REFUSED", "INVALID_TIER",
	"NOT_LEASABLE", "INVALID_MAX_GRANT", "INVALID_HORIZON", "INVALID_EXPIRE",
	"INVALID_SKEW", "INVALID_FAILURE", "INVALID_REPLY", "INVALID_GRANT",
	"INVALID_STATES", "DENIED",
}

// Name is the status's C name without the RATECELL_ prefix, e.g.
// "INVALID_LIMIT" ("STATUS_<n>" for a number the ABI does not define).
func (s Status) Name() string {
	if s <= lastStatus {
		return statusNames[s]
	}
	return "STATUS_" + strconv.FormatUint(uint64(s), 10)
}

// String is the library's own description (ratecell_status_str).
func (s Status) String() string {
	return C.GoString(C.ratecell_status_str(C.ratecell_status(s)))
}

// Error is what every call that fails returns (except ErrClosed, and the
// context's own error when Acquire is cancelled before any status applies).
// Match it with errors.Is against the Err* sentinels, or take it apart with
// errors.As to read Status and Op.
type Error struct {
	// Op is the method that failed ("new", "check", "acquire", ...); empty
	// in the sentinels.
	Op string
	// Status is the C ABI's reason.
	Status Status
	// Err is an underlying cause, when there is one: Acquire's time-out
	// by a context deadline wraps context.DeadlineExceeded here.
	Err error
}

func (e *Error) Error() string {
	msg := "ratecell"
	if e.Op != "" {
		msg += ": " + e.Op
	}
	msg += ": " + e.Status.String()
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap gives the underlying cause (nil for most statuses).
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrInvalidLimit) true for every *Error with
// that status, whatever its Op or cause.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Op == "" && t.Err == nil && t.Status == e.Status
}

func sentinel(s Status) *Error { return &Error{Status: s} }

// Sentinels for errors.Is, one per failing status of the C ABI.
var (
	// ErrNullArgument: a required argument was missing: Options.Path or
	// Options.Shared, for the States that need them. Otherwise the binding
	// never passes NULL, so seeing it means a bug.
	ErrNullArgument = sentinel(StatusNullArgument)
	// ErrInvalidAlgorithm: Config.Algorithm is not one of the constants.
	ErrInvalidAlgorithm = sentinel(StatusInvalidAlgorithm)
	// ErrInvalidLimit: Config.Limit is outside 1 ..= 2^32-1 (or, for GCRA
	// and the leaky bucket, above the period in nanoseconds).
	ErrInvalidLimit = sentinel(StatusInvalidLimit)
	// ErrInvalidPeriod: Config.Period is outside 1 µs ..= 366 days.
	ErrInvalidPeriod = sentinel(StatusInvalidPeriodNs)
	// ErrInvalidBurst: Config.Burst is out of range for the algorithm.
	ErrInvalidBurst = sentinel(StatusInvalidBurst)
	// ErrInvalidSubWindows: Config.SubWindows is outside 1 ..= 64 or does
	// not divide the period (bucketed window only).
	ErrInvalidSubWindows = sentinel(StatusInvalidSubWindows)
	// ErrInvalidCapacity: Config.Capacity is larger than memory can address.
	ErrInvalidCapacity = sentinel(StatusInvalidCapacity)
	// ErrInvalidOverflow: Config.Overflow is not one of the constants.
	ErrInvalidOverflow = sentinel(StatusInvalidOverflow)
	// ErrInvalidClock: Config.Clock is not one of the constants.
	ErrInvalidClock = sentinel(StatusInvalidClock)
	// ErrUnknownAlgorithm: ParseAlgorithm was given a name that names none.
	ErrUnknownAlgorithm = sentinel(StatusUnknownAlgorithm)
	// ErrOutOfMemory: the limiter's table could not be allocated.
	ErrOutOfMemory = sentinel(StatusOutOfMemory)
	// ErrTimedOut: Acquire's context deadline came (or would come) before
	// the request was admitted. Such errors also match
	// context.DeadlineExceeded.
	ErrTimedOut = sentinel(StatusTimedOut)
	// ErrCostExceedsLimit: Acquire was asked for more than the limiter can
	// ever admit at once (Decision.RetryAfter == Never); no wait helps.
	ErrCostExceedsLimit = sentinel(StatusCostExceedsLimit)
	// ErrInvalidLength: a batch's slices differ in length.
	ErrInvalidLength = sentinel(StatusInvalidLength)
	// ErrPanic: a bug inside the library, caught before it crossed into Go.
	// The limiter is still safe to use and to close.
	ErrPanic = sentinel(StatusPanic)
	// ErrSnapshotIO: a snapshot file could not be read or written.
	ErrSnapshotIO = sentinel(StatusSnapshotIO)
	// ErrSnapshotNotFound: no file at Options.Path (StatesSnapshot).
	ErrSnapshotNotFound = sentinel(StatusSnapshotNotFound)
	// ErrSnapshotDamaged: the file is not a snapshot, is truncated, or is
	// damaged.
	ErrSnapshotDamaged = sentinel(StatusSnapshotDamaged)
	// ErrSnapshotVersion: the snapshot's format version is not supported.
	ErrSnapshotVersion = sentinel(StatusSnapshotVersion)
	// ErrSnapshotConfigMismatch: NewWith, its states from a snapshot
	// (StatesSnapshot, StatesPersisted), was given another configuration,
	// other limits or other tiers than the snapshot's.
	ErrSnapshotConfigMismatch = sentinel(StatusSnapshotConfigMismatch)
	// ErrSnapshotSeveralLimits: reserved, no longer returned (limiters of
	// several limits are saved since snapshot format version 2).
	ErrSnapshotSeveralLimits = sentinel(StatusSnapshotSeveralLimits)
	// ErrSharedIO: Options.Shared could not be opened, created, sized or
	// mapped.
	ErrSharedIO = sentinel(StatusSharedIO)
	// ErrSharedNotARegion: Options.Shared is not a ratecell region.
	ErrSharedNotARegion = sentinel(StatusSharedNotARegion)
	// ErrSharedTruncated: Options.Shared is shorter than its region.
	ErrSharedTruncated = sentinel(StatusSharedTruncated)
	// ErrSharedVersion: Options.Shared has another layout version.
	ErrSharedVersion = sentinel(StatusSharedVersion)
	// ErrSharedConfigMismatch: Options.Shared was made with another
	// configuration.
	ErrSharedConfigMismatch = sentinel(StatusSharedConfigMismatch)
	// ErrSharedStale: Options.Shared was made before the last boot.
	ErrSharedStale = sentinel(StatusSharedStale)
	// ErrSharedUnsupported: this algorithm, capacity 0 or platform cannot
	// be shared.
	ErrSharedUnsupported = sentinel(StatusSharedUnsupported)
	// ErrReconfigureRefused: Reconfigure was given a change with no
	// carry-over for the kept states, or one of what cannot change.
	ErrReconfigureRefused = sentinel(StatusReconfigureRefused)
	// ErrInvalidTier: CheckTier named a tier the limiter does not have
	// (not below Tiers()); nothing was checked.
	ErrInvalidTier = sentinel(StatusInvalidTier)
	// ErrInvalidStates: Options.States is not a States value, or a field
	// those states do not read is set (Path or SaveEvery for fresh
	// states, Shared for any but StatesShared, SaveEvery for a snapshot or
	// a region).
	ErrInvalidStates = sentinel(StatusInvalidStates)
)

// ErrClosed is returned by every call on a Limiter after Close (and on a
// nil *Limiter).
var ErrClosed = errors.New("ratecell: limiter is closed")

// statusError turns a C status into nil or an *Error for op.
func statusError(op string, s C.ratecell_status) error {
	if s == C.RATECELL_OK {
		return nil
	}
	return &Error{Op: op, Status: Status(s)}
}
