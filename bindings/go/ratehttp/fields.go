package ratehttp

// This file owns the response fields of draft-ietf-httpapi-ratelimit-headers-11
// and the quota-exceeded problem document, as pure functions of per-limit
// decisions (RFC 9651 strings, integers and lists). It knows nothing about
// requests or limiters.

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	ratecell "github.com/ratecell/ratecell-go"
)

// QuotaExceededType is the draft's problem type for a request refused by
// one or more quota policies (section 5.1).
const QuotaExceededType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// SFIntegerMax is the largest Integer RFC 9651 can serialize (15 digits);
// larger values are sent as this.
const SFIntegerMax = 999_999_999_999_999

// DefaultName is the policy name of a limit that was not given one.
const DefaultName = "default"

// LimitDecision is one limit's part of a request's outcome.
type LimitDecision struct {
	Name     string            // the policy name (printable ASCII)
	Limit    uint64            // the quota q: units per Period
	Period   time.Duration     // the window w (sent in whole seconds, rounded up)
	Decision ratecell.Decision // this limit's decision for the request
}

// CheckName returns an error naming name unless it can be an RFC 9651
// String: non-empty, printable ASCII (0x20..0x7E).
func CheckName(name string) error {
	if name == "" {
		return fmt.Errorf("ratehttp: invalid policy name %q: empty", name)
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return fmt.Errorf("ratehttp: invalid policy name %q: byte %d is not printable ASCII (an RFC 9651 String)", name, i)
		}
	}
	return nil
}

// CeilSeconds is d in whole seconds, rounded up, capped at SFIntegerMax
// (negative durations are 0).
func CeilSeconds(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	s := (uint64(d) + uint64(time.Second) - 1) / uint64(time.Second)
	return min(s, SFIntegerMax)
}

func sfString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
}

func sfInt(b *strings.Builder, key string, v uint64) {
	b.WriteByte(';')
	b.WriteString(key)
	b.WriteByte('=')
	b.WriteString(strconv.FormatUint(min(v, SFIntegerMax), 10))
}

// QuotaWindow is the q and w of a limit of limit units per period: w is
// the period in whole seconds, rounded up (at least 1: the draft's window
// is a non-zero integer), and when the period is not a whole number of
// seconds q is scaled to that window, rounded down, so that q/w is never
// more than the real rate (10 per 500ms is q=20;w=1, 10 per 1.5s is
// q=13;w=2). Without scaling a 500ms period would advertise half its rate.
func QuotaWindow(limit uint64, period time.Duration) (q, w uint64) {
	w = max(CeilSeconds(period), 1)
	if period <= 0 || period%time.Second == 0 {
		return min(limit, SFIntegerMax), w
	}
	// limit × w s / period in 128 bits: limit may be large.
	hi, lo := bits.Mul64(limit, w*uint64(time.Second))
	if hi >= uint64(period) {
		return SFIntegerMax, w
	}
	q, _ = bits.Div64(hi, lo, uint64(period))
	return min(q, SFIntegerMax), w
}

// PolicyField is the RateLimit-Policy value: one "<name>";q=<limit>;w=<period>
// item per limit, as QuotaWindow gives them.
func PolicyField(items []LimitDecision) string {
	var b strings.Builder
	for i, it := range items {
		if i > 0 {
			b.WriteString(", ")
		}
		sfString(&b, it.Name)
		q, w := QuotaWindow(it.Limit, it.Period)
		sfInt(&b, "q", q)
		sfInt(&b, "w", w)
	}
	return b.String()
}

// ResetSeconds is the t of one limit's decision, in whole seconds rounded
// up: the time until more quota is available (draft-11 §4.3).
//
//   - Refused by this limit: its RetryAfter (at least 1), when this same
//     request could pass; the same value as Retry-After when this limit's
//     wait is the longest. A keyed table with no room for a new key
//     (overflow deny) refuses with the table's wait, so t carries that
//     wait, never 0. When no wait helps (ratecell.Never), ResetAfter.
//   - Admitted: ResetAfter, when the quota is whole again; more is
//     available by then at the latest (exactly then for a fixed window).
//     0 when the quota is whole.
func ResetSeconds(d ratecell.Decision) uint64 {
	if !d.Allowed && d.RetryAfter != ratecell.Never {
		return max(CeilSeconds(d.RetryAfter), 1)
	}
	return CeilSeconds(d.ResetAfter)
}

// RateLimitField is the RateLimit value: one "<name>";r=<remaining>;t=<seconds>
// item per limit, t as ResetSeconds gives it.
func RateLimitField(items []LimitDecision) string {
	var b strings.Builder
	for i, it := range items {
		if i > 0 {
			b.WriteString(", ")
		}
		sfString(&b, it.Name)
		sfInt(&b, "r", it.Decision.Remaining)
		sfInt(&b, "t", ResetSeconds(it.Decision))
	}
	return b.String()
}

// LegacyValues are the legacy X-RateLimit-Limit, -Remaining and -Reset
// values (GitHub's, httprate's, slowapi's), which describe one limit: of a
// refused request the refusing limit whose wait is the longest (the one
// Retry-After gives), else the limit with the fewest units left (the first
// of equals). Limit is its q (as RateLimit-Policy says it), Remaining its
// r, and Reset the UNIX time in whole seconds when its t ends, counted
// from now. ok is false for no items.
func LegacyValues(items []LimitDecision, now time.Time) (limit, remaining, reset uint64, ok bool) {
	refused := !Admitted(items)
	pick := -1
	for i, it := range items {
		switch {
		case refused && !it.Decision.Allowed:
			if pick < 0 || ResetSeconds(it.Decision) > ResetSeconds(items[pick].Decision) {
				pick = i
			}
		case !refused:
			if pick < 0 || it.Decision.Remaining < items[pick].Decision.Remaining {
				pick = i
			}
		}
	}
	if pick < 0 {
		return 0, 0, 0, false
	}
	it := items[pick]
	q, _ := QuotaWindow(it.Limit, it.Period)
	unix := uint64(max(now.Unix(), 0))
	return q, min(it.Decision.Remaining, SFIntegerMax), unix + ResetSeconds(it.Decision), true
}

// Admitted reports whether every limit admitted the request.
func Admitted(items []LimitDecision) bool {
	for _, it := range items {
		if !it.Decision.Allowed {
			return false
		}
	}
	return true
}

// RetryAfterSeconds is the Retry-After of a refused request: the longest
// RetryAfter of the refusing limits in whole seconds, rounded up (at least
// 1). ok is false when the request was admitted, or when some limit can
// never admit it (RetryAfter == ratecell.Never): no wait helps, so no
// Retry-After is sent.
func RetryAfterSeconds(items []LimitDecision) (seconds uint64, ok bool) {
	var longest time.Duration
	for _, it := range items {
		if it.Decision.Allowed {
			continue
		}
		if it.Decision.RetryAfter == ratecell.Never {
			return 0, false
		}
		ok = true
		longest = max(longest, it.Decision.RetryAfter)
	}
	if !ok {
		return 0, false
	}
	return max(CeilSeconds(longest), 1), true
}

// ProblemBody is the application/problem+json document of a refusal: the
// draft's quota-exceeded type, a title, and violated-policies naming each
// limit that refused the request.
func ProblemBody(items []LimitDecision) []byte {
	var b strings.Builder
	b.WriteString(`{"type":"` + QuotaExceededType + `","title":"Quota exceeded","status":429,"violated-policies":[`)
	n := 0
	for _, it := range items {
		if it.Decision.Allowed {
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		// Names are printable ASCII (CheckName): only '"' and '\' need escapes.
		sfString(&b, it.Name)
		n++
	}
	b.WriteString("]}")
	return []byte(b.String())
}
