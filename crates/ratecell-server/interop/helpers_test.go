package interop

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
	"testing"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	h "github.com/ratecell/ratecell-server/interop/harness"
)

// eachServer runs f as a parallel subtest against every server kind in
// INTEROP_SERVERS that is one of kinds (all of them when kinds is empty).
// The leased kind runs only when INTEROP_SERVERS names it: its
// limit_remaining is a replica's local view (docs/SERVER.md), so the exact
// answers of these tests are not its contract; leased_test.go has its own.
func eachServer(t *testing.T, f func(t *testing.T, k h.Kind), kinds ...h.Kind) {
	t.Parallel()
	ran := false
	for _, k := range h.Kinds() {
		if len(kinds) > 0 && !contains(kinds, k) {
			continue
		}
		ran = true
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			f(t, k)
		})
	}
	if !ran {
		t.Skipf("for %v only, none of them in INTEROP_SERVERS", kinds)
	}
}

func contains(ks []h.Kind, k h.Kind) bool {
	for _, e := range ks {
		if e == k {
			return true
		}
	}
	return false
}

// brief renders a response as "OVERALL: CODE remaining limit; ..." with
// "-" for a missing current_limit, the form the tests compare.
func brief(resp *rls.RateLimitResponse) string {
	parts := make([]string, len(resp.Statuses))
	for i, s := range h.Statuses(resp) {
		limit := s.Limit
		if limit == "" {
			limit = "-"
		}
		parts[i] = fmt.Sprintf("%s %d %s", s.Code, s.Remaining, limit)
	}
	return resp.OverallCode.String() + ": " + strings.Join(parts, "; ")
}

// step is one request and the brief answer it must get.
type step struct {
	req  *rls.RateLimitRequest
	want string
}

// run sends the steps in order and compares each answer.
func run(t *testing.T, c *h.Client, steps ...step) {
	t.Helper()
	for i, s := range steps {
		got := brief(c.Check(t, s.req))
		if got != s.want {
			t.Errorf("step %d: %s\n  got  %s\n  want %s", i, h.Show(s.req), got, s.want)
		}
	}
}

// metric is one sample of Prometheus text.
type metric struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads Prometheus text exposition (no escapes in label
// values beyond \" and \\, which the tests' names do not use).
func parseMetrics(text string) ([]metric, error) {
	var out []metric
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		m := metric{labels: map[string]string{}}
		rest := line
		if i := strings.IndexAny(line, "{ "); i >= 0 && line[i] == '{' {
			m.name = line[:i]
			j := strings.LastIndex(line, "}")
			if j < i {
				return nil, fmt.Errorf("bad line %q", line)
			}
			for _, kv := range splitLabels(line[i+1 : j]) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return nil, fmt.Errorf("bad label %q in %q", kv, line)
				}
				m.labels[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
			}
			rest = strings.TrimSpace(line[j+1:])
		} else {
			name, r, _ := strings.Cut(line, " ")
			m.name, rest = name, strings.TrimSpace(r)
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("no value in %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("value in %q: %v", line, err)
		}
		m.value = v
		out = append(out, m)
	}
	return out, sc.Err()
}

func splitLabels(s string) []string {
	var out []string
	var cur strings.Builder
	inQuote := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && inQuote && i+1 < len(s):
			cur.WriteByte(s[i+1])
			i++
			continue
		case c == '"':
			inQuote = !inQuote
		case c == ',' && !inQuote:
			if strings.TrimSpace(cur.String()) != "" {
				out = append(out, cur.String())
			}
			cur.Reset()
			continue
		}
		cur.WriteByte(c)
	}
	if strings.TrimSpace(cur.String()) != "" {
		out = append(out, cur.String())
	}
	return out
}

// sample finds the value of name whose domain, key1 and key2 labels are
// want's; ok is false
// when there is none.
func sample(ms []metric, name string, want map[string]string) (float64, bool) {
	for _, m := range ms {
		if m.name != name {
			continue
		}
		// The descriptor labels must be exactly these: a key2 sample is not
		// its key1's.
		match := true
		for _, k := range []string{"domain", "key1", "key2"} {
			if m.labels[k] != want[k] {
				match = false
				break
			}
		}
		if match {
			return m.value, true
		}
	}
	return 0, false
}
