package ratecell_test

// The cross-language parity contract: tests/parity/trace.csv replayed
// through the Go API must print tests/parity/expected.csv exactly, every
// field of every decision (tests/parity.rs describes both formats and is the
// Rust side of the same check).

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratecell/ratecell-go"
)

// nanos turns a Decision duration back into the C ABI's nanoseconds: Never
// is u64::MAX. No other value at or above 2^63 can reach Go (the library
// saturates, and the trace keeps times below 2^62), so this is exact.
func nanos(d time.Duration) uint64 {
	if d == ratecell.Never {
		return math.MaxUint64
	}
	return uint64(d)
}

func replayParityTrace(t *testing.T, trace string) []string {
	t.Helper()
	limiters := map[string]*ratecell.Limiter{}
	t.Cleanup(func() {
		for _, l := range limiters {
			l.Close()
		}
	})
	var out []string
	scanner := bufio.NewScanner(strings.NewReader(trace))
	for number := 1; scanner.Scan(); number++ {
		text := scanner.Text()
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Split(text, ",")
		num := func(i int) uint64 {
			v, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				t.Fatalf("trace line %d field %d: %v", number, i, err)
			}
			return v
		}
		var d ratecell.Decision
		var err error
		switch f[0] {
		case "limiter":
			alg, perr := ratecell.ParseAlgorithm(f[2])
			if perr != nil {
				t.Fatalf("trace line %d: %v", number, perr)
			}
			overflow := ratecell.OverflowDeny
			if f[8] == "allow" {
				overflow = ratecell.OverflowAllow
			}
			l, nerr := ratecell.New(ratecell.Config{
				Algorithm:  alg,
				Limit:      num(3),
				Period:     time.Duration(num(4)),
				Burst:      num(5),
				SubWindows: uint32(num(6)),
				Capacity:   num(7),
				Overflow:   overflow,
			})
			if nerr != nil {
				t.Fatalf("trace line %d: %v", number, nerr)
			}
			limiters[f[1]] = l
			continue
		case "check":
			d, err = limiters[f[1]].Check(ratecell.Request{Key: ratecell.Uint64Key(num(2)), Cost: num(3), Peek: num(3) == 0, At: num(4)})
		case "check_bytes":
			key, herr := hex.DecodeString(f[2])
			if herr != nil {
				t.Fatalf("trace line %d: %v", number, herr)
			}
			d, err = limiters[f[1]].Check(ratecell.Request{Key: ratecell.BytesKey(key), Cost: num(3), Peek: num(3) == 0, At: num(4)})
		case "reset_key":
			err = limiters[f[1]].Reset(ratecell.Uint64Key(num(2)))
			if err != nil {
				t.Fatalf("trace line %d: %v", number, err)
			}
			continue
		default:
			t.Fatalf("trace line %d: unknown record %q", number, f[0])
		}
		if err != nil {
			t.Fatalf("trace line %d: %v", number, err)
		}
		allowed := 0
		if d.Allowed {
			allowed = 1
		}
		out = append(out, fmt.Sprintf("%d,%d,%d,%d,%d,%d,%d", number, allowed, d.Limit, d.Remaining,
			nanos(d.RetryAfter), nanos(d.ResetAfter), nanos(d.Wait)))
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestParity(t *testing.T) {
	trace, err := os.ReadFile("../../tests/parity/trace.csv")
	if err != nil {
		t.Fatal(err)
	}
	expectedText, err := os.ReadFile("../../tests/parity/expected.csv")
	if err != nil {
		t.Fatal(err)
	}
	expected := strings.Split(strings.TrimRight(string(expectedText), "\n"), "\n")
	for _, line := range expected {
		for _, field := range strings.Split(line, ",")[4:] {
			if v, _ := strconv.ParseUint(field, 10, 64); v > math.MaxInt64 && v != math.MaxUint64 {
				t.Fatalf("expected.csv has a duration Decision cannot hold exactly: %s", line)
			}
		}
	}
	got := replayParityTrace(t, string(trace))
	for i := 0; i < len(got) && i < len(expected); i++ {
		if got[i] != expected[i] {
			t.Fatalf("decision %d differs:\n  go:       %s\n  expected: %s", i+1, got[i], expected[i])
		}
	}
	if len(got) != len(expected) {
		t.Fatalf("%d decisions, expected.csv has %d", len(got), len(expected))
	}
	if len(got) < 800 {
		t.Fatalf("only %d decisions: the trace should exercise every limiter", len(got))
	}
}
