package interop

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	h "github.com/ratecell/ratecell-server/interop/harness"
	"google.golang.org/protobuf/encoding/protojson"
)

// confYAML is the conformance domain: one descriptor per feature, so each
// test touches only its own counters. Exact counts use hour limits (one
// window boundary an hour) and wait out the last seconds of a window.
const confYAML = `domain: conf
descriptors:
  - key: exact
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: cli
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: nested
    value: outer
    descriptors:
      - key: inner
        rate_limit: {unit: hour, requests_per_unit: 2}
  - key: wild
    value: "pre*"
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: share
    value: "sh*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: unl
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: replaced
    rate_limit: {unit: hour, requests_per_unit: 1, name: small}
  - key: replacer
    rate_limit: {unit: hour, requests_per_unit: 5, replaces: [{name: small}]}
  - key: addend
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: one
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: five
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: js
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: met
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: hdr
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: whitelisted
`

func startConf(t *testing.T, k h.Kind, env map[string]string) *h.Server {
	return h.Start(t, h.Options{Kind: k, Configs: map[string]string{"conf.yaml": confYAML}, Env: env})
}

// hourly waits out the last half minute of an hour, so a test's hour
// limits see all its hits in one window.
func hourly(t *testing.T) { h.FreshWindow(t, time.Hour, 30*time.Second) }

// TestExactCountPerWindow: a 3/minute limit admits exactly three hits in a
// minute, with limit_remaining counting down and duration_until_reset the
// seconds left in the minute.
func TestExactCountPerWindow(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startConf(t, k, nil).Client(t)
		h.FreshWindow(t, time.Minute, 10*time.Second)
		wantRemaining := []uint32{2, 1, 0, 0, 0}
		for i, rem := range wantRemaining {
			before := time.Now().Unix()
			resp := c.Check(t, h.Req("conf", 0, h.D("exact", "a")))
			after := time.Now().Unix()
			code := "OK"
			if i >= 3 {
				code = "OVER_LIMIT"
			}
			want := fmt.Sprintf("%s: %s %d 3/MINUTE", code, code, rem)
			if got := brief(resp); got != want {
				t.Errorf("hit %d: got %s, want %s", i+1, got, want)
			}
			// envoyproxy/ratelimit: unit seconds - now % unit seconds, in
			// whole seconds (utils.CalculateReset).
			reset := resp.Statuses[0].DurationUntilReset
			lo, hi := 60-after%60, 60-before%60
			if reset == nil || reset.Seconds < lo || reset.Seconds > hi || reset.Nanos != 0 {
				t.Errorf("hit %d: duration_until_reset %v, want whole seconds in [%d, %d]", i+1, reset, lo, hi)
			}
		}
		// Another value of the same key has its own counter.
		run(t, c, step{h.Req("conf", 0, h.D("exact", "b")), "OK: OK 2 3/MINUTE"})
	})
}

// TestRatelimitClient: envoyproxy/ratelimit's own client, client_cmd.
func TestRatelimitClient(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := startConf(t, k, nil)
		hourly(t)
		bin := h.IncumbentClientBin()
		overall := regexp.MustCompile(`overall_code:\s*(\w+)`)
		remaining := regexp.MustCompile(`limit_remaining:\s*(\d+)`)
		want := []struct{ code, remaining string }{{"OK", "1"}, {"OK", ""}, {"OVER_LIMIT", ""}}
		for i, w := range want {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			out, err := exec.CommandContext(ctx, bin, "-dial_string", s.GRPCAddr, "-domain", "conf",
				"-descriptors", "cli=x").CombinedOutput()
			cancel()
			if err != nil {
				t.Fatalf("client_cmd: %v\n%s", err, out)
			}
			m := overall.FindStringSubmatch(string(out))
			if m == nil || m[1] != w.code {
				t.Errorf("call %d: want overall_code %s in\n%s", i+1, w.code, out)
			}
			// proto text omits a zero limit_remaining.
			r := remaining.FindStringSubmatch(string(out))
			got := ""
			if r != nil {
				got = r[1]
			}
			if got != w.remaining {
				t.Errorf("call %d: limit_remaining %q, want %q in\n%s", i+1, got, w.remaining, out)
			}
		}
		// Two descriptors, one nested, one unknown.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, "-dial_string", s.GRPCAddr, "-domain", "conf",
			"-descriptors", "nested=outer,inner=cli", "-descriptors", "nosuchkey=x").CombinedOutput()
		if err != nil {
			t.Fatalf("client_cmd: %v\n%s", err, out)
		}
		text := string(out)
		if m := overall.FindStringSubmatch(text); m == nil || m[1] != "OK" ||
			len(remaining.FindAllString(text, -1)) != 1 || remaining.FindStringSubmatch(text)[1] != "1" ||
			strings.Count(text, "current_limit") != 1 {
			t.Errorf("two descriptors: want overall OK, one current_limit and limit_remaining 1 (the nested one's) in\n%s", out)
		}
	})
}

func TestNestedDescriptors(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startConf(t, k, nil).Client(t)
		hourly(t)
		run(t, c,
			step{h.Req("conf", 0, h.D("nested", "outer", "inner", "x")), "OK: OK 1 2/HOUR"},
			step{h.Req("conf", 0, h.D("nested", "outer", "inner", "x")), "OK: OK 0 2/HOUR"},
			step{h.Req("conf", 0, h.D("nested", "outer", "inner", "x")), "OVER_LIMIT: OVER_LIMIT 0 2/HOUR"},
			// Each inner value counts on its own.
			step{h.Req("conf", 0, h.D("nested", "outer", "inner", "y")), "OK: OK 1 2/HOUR"},
			// The outer level alone has no limit; another outer value is unknown.
			step{h.Req("conf", 0, h.D("nested", "outer")), "OK: OK 0 -"},
			step{h.Req("conf", 0, h.D("nested", "other", "inner", "x")), "OK: OK 0 -"},
		)
	})
}

func TestWildcardDescriptors(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startConf(t, k, nil).Client(t)
		hourly(t)
		run(t, c,
			step{h.Req("conf", 0, h.D("wild", "pre1")), "OK: OK 1 2/HOUR"},
			step{h.Req("conf", 0, h.D("wild", "pre1")), "OK: OK 0 2/HOUR"},
			step{h.Req("conf", 0, h.D("wild", "pre1")), "OVER_LIMIT: OVER_LIMIT 0 2/HOUR"},
			// Without share_threshold, each matching value has its own counter.
			step{h.Req("conf", 0, h.D("wild", "pre2")), "OK: OK 1 2/HOUR"},
			// The bare prefix matches too (the star matches nothing).
			step{h.Req("conf", 0, h.D("wild", "pre")), "OK: OK 1 2/HOUR"},
			step{h.Req("conf", 0, h.D("wild", "px")), "OK: OK 0 -"},
			// With share_threshold, all matching values share one counter.
			step{h.Req("conf", 0, h.D("share", "sha")), "OK: OK 1 2/HOUR"},
			step{h.Req("conf", 0, h.D("share", "shb")), "OK: OK 0 2/HOUR"},
			step{h.Req("conf", 0, h.D("share", "shc")), "OVER_LIMIT: OVER_LIMIT 0 2/HOUR"},
		)
	})
}

func TestReplaces(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startConf(t, k, nil).Client(t)
		hourly(t)
		run(t, c,
			// In one request, "replacer" drops the limit named "small".
			step{h.Req("conf", 0, h.D("replaced", "a"), h.D("replacer", "a")), "OK: OK 0 -; OK 4 5/HOUR"},
			step{h.Req("conf", 0, h.D("replaced", "a"), h.D("replacer", "a")), "OK: OK 0 -; OK 3 5/HOUR"},
			// Alone, "small" applies, and the replaced hits did not count on it.
			step{h.Req("conf", 0, h.D("replaced", "a")), "OK: OK 0 1/HOUR(small)"},
			step{h.Req("conf", 0, h.D("replaced", "a")), "OVER_LIMIT: OVER_LIMIT 0 1/HOUR(small)"},
		)
	})
}

func TestShadowMode(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startConf(t, k, nil).Client(t)
		hourly(t)
		// A shadow_mode limit over its count answers OK, with the limit and
		// nothing remaining.
		run(t, c,
			step{h.Req("conf", 0, h.D("shadow", "a")), "OK: OK 0 1/HOUR"},
			step{h.Req("conf", 0, h.D("shadow", "a")), "OK: OK 0 1/HOUR"},
			step{h.Req("conf", 0, h.D("one", "a")), "OK: OK 0 1/HOUR"},
			step{h.Req("conf", 0, h.D("one", "a")), "OVER_LIMIT: OVER_LIMIT 0 1/HOUR"},
		)
	})
}

// TestGlobalShadowMode: SHADOW_MODE=true makes the overall code OK while
// the descriptor still says OVER_LIMIT.
func TestGlobalShadowMode(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startConf(t, k, map[string]string{"SHADOW_MODE": "true"}).Client(t)
		hourly(t)
		run(t, c,
			step{h.Req("conf", 0, h.D("one", "g")), "OK: OK 0 1/HOUR"},
			step{h.Req("conf", 0, h.D("one", "g")), "OK: OVER_LIMIT 0 1/HOUR"},
		)
	})
}

func TestUnlimitedUnknownAndWhitelisted(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startConf(t, k, nil).Client(t)
		unlimited := fmt.Sprintf("OK: OK %d -", uint32(math.MaxUint32))
		var steps []step
		for range 5 {
			steps = append(steps, step{h.Req("conf", 0, h.D("unl", "a")), unlimited})
		}
		steps = append(steps,
			step{h.Req("conf", 100, h.D("unl", "a")), unlimited},
			// An unknown domain, an unknown key, a key without a rate_limit:
			// OK without a current_limit.
			step{h.Req("nosuchdomain", 0, h.D("exact", "a")), "OK: OK 0 -"},
			step{h.Req("conf", 0, h.D("nosuchkey", "a")), "OK: OK 0 -"},
			step{h.Req("conf", 0, h.D("whitelisted", "a")), "OK: OK 0 -"},
			step{h.Req("conf", 0, h.D("exact", "a", "deeper", "b")), "OK: OK 0 -"},
		)
		run(t, c, steps...)
	})
}

func TestHitsAddend(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startConf(t, k, nil).Client(t)
		hourly(t)
		run(t, c,
			step{h.Req("conf", 3, h.D("addend", "a")), "OK: OK 7 10/HOUR"},
			step{h.Req("conf", 7, h.D("addend", "a")), "OK: OK 0 10/HOUR"},
			step{h.Req("conf", 1, h.D("addend", "a")), "OVER_LIMIT: OVER_LIMIT 0 10/HOUR"},
			// More than the limit at once is refused.
			step{h.Req("conf", 11, h.D("addend", "b")), "OVER_LIMIT: OVER_LIMIT 0 10/HOUR"},
			// A descriptor's own hits_addend wins over the request's.
			step{h.Req("conf", 0, h.DHits(4, "addend", "c")), "OK: OK 6 10/HOUR"},
			step{h.Req("conf", 2, h.DHits(5, "addend", "c")), "OK: OK 1 10/HOUR"},
			step{h.Req("conf", 0, h.D("addend", "c")), "OK: OK 0 10/HOUR"},
		)
	})
}

// TestDeniedHitsAreNotCounted shows named difference (2): after a denied
// hits_addend of 5 with 2 left, ratecell still admits two single hits;
// envoyproxy/ratelimit counted the 5 and admits none.
func TestDeniedHitsAreNotCounted(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startConf(t, k, nil).Client(t)
		hourly(t)
		run(t, c,
			step{h.Req("conf", 8, h.D("addend", "d")), "OK: OK 2 10/HOUR"},
			step{h.Req("conf", 5, h.D("addend", "d")), "OVER_LIMIT: OVER_LIMIT 0 10/HOUR"},
		)
		if k.Ratecell() {
			run(t, c,
				step{h.Req("conf", 0, h.D("addend", "d")), "OK: OK 1 10/HOUR"},
				step{h.Req("conf", 0, h.D("addend", "d")), "OK: OK 0 10/HOUR"},
				step{h.Req("conf", 0, h.D("addend", "d")), "OVER_LIMIT: OVER_LIMIT 0 10/HOUR"},
			)
		} else {
			run(t, c, step{h.Req("conf", 0, h.D("addend", "d")), "OVER_LIMIT: OVER_LIMIT 0 10/HOUR"})
		}
	})
}

// TestSeveralDescriptors: every descriptor gets its own status; the
// overall code is OVER_LIMIT when any is.
func TestSeveralDescriptors(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startConf(t, k, nil).Client(t)
		hourly(t)
		run(t, c,
			step{h.Req("conf", 0, h.D("five", "s"), h.D("nested", "outer", "inner", "s"), h.D("nosuchkey", "s"), h.D("unl", "s")),
				fmt.Sprintf("OK: OK 4 5/HOUR; OK 1 2/HOUR; OK 0 -; OK %d -", uint32(math.MaxUint32))},
			step{h.Req("conf", 0, h.D("five", "s"), h.D("nested", "outer", "inner", "s")), "OK: OK 3 5/HOUR; OK 0 2/HOUR"},
			step{h.Req("conf", 2, h.D("five", "s"), h.D("unl", "s")), fmt.Sprintf("OK: OK 1 5/HOUR; OK %d -", uint32(math.MaxUint32))},
		)
	})
}

// TestAllOrNothing shows named difference (1): a request denied on one
// descriptor consumes nothing on the others with ratecell; the incumbent
// counts the hit on every descriptor.
func TestAllOrNothing(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startConf(t, k, nil).Client(t)
		hourly(t)
		run(t, c, step{h.Req("conf", 0, h.D("one", "n"), h.D("five", "n")), "OK: OK 0 1/HOUR; OK 4 5/HOUR"})
		denied := c.Check(t, h.Req("conf", 0, h.D("one", "n"), h.D("five", "n")))
		if denied.OverallCode != rls.RateLimitResponse_OVER_LIMIT || denied.Statuses[0].Code != rls.RateLimitResponse_OVER_LIMIT {
			t.Errorf("second request: got %s, want OVER_LIMIT overall and on one=n", brief(denied))
		}
		t.Logf("%s: the denied request's answer: %s", k, brief(denied))
		want := "OK: OK 3 5/HOUR" // ratecell: the denied request took nothing from five=n
		if !k.Ratecell() {
			want = "OK: OK 2 5/HOUR" // incumbent: it took one
		}
		run(t, c, step{h.Req("conf", 0, h.D("five", "n")), want})
	})
}

// TestJSONEndpoint: POST /json takes the request as proto3 JSON and answers
// the response as proto3 JSON, 200 when OK and 429 when over the limit.
func TestJSONEndpoint(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := startConf(t, k, nil)
		hourly(t)
		body := `{"domain":"conf","descriptors":[{"entries":[{"key":"js","value":"1"}]}]}`
		for i, want := range []struct {
			status int
			brief  string
		}{{http.StatusOK, "OK: OK 0 1/HOUR"}, {http.StatusTooManyRequests, "OVER_LIMIT: OVER_LIMIT 0 1/HOUR"}} {
			code, text, err := s.Post("/json", body)
			if err != nil {
				t.Fatal(err)
			}
			if code != want.status {
				t.Errorf("POST %d: status %d, want %d (body %s)", i+1, code, want.status, text)
			}
			var resp rls.RateLimitResponse
			if err := protojson.Unmarshal([]byte(text), &resp); err != nil {
				t.Fatalf("POST %d: body is not a RateLimitResponse in proto3 JSON: %v\n%s", i+1, err, text)
			}
			if got := brief(&resp); got != want.brief {
				t.Errorf("POST %d: body %s, want %s", i+1, got, want.brief)
			}
			// The field names are proto3 JSON's (lowerCamelCase).
			var raw map[string]any
			if err := json.Unmarshal([]byte(text), &raw); err != nil {
				t.Fatal(err)
			}
			if _, ok := raw["overallCode"]; !ok {
				t.Errorf("POST %d: no overallCode in %s", i+1, text)
			}
		}
		// A body that is not a request is a client error.
		if code, text, err := s.Post("/json", "{not json"); err != nil || code != http.StatusBadRequest {
			t.Errorf("POST of bad JSON: %d %q %v, want 400", code, text, err)
		}
	})
}

func TestHealthcheck(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := startConf(t, k, nil)
		code, body, err := s.Get("/healthcheck")
		if err != nil || code != http.StatusOK {
			t.Fatalf("/healthcheck: %d %q %v", code, body, err)
		}
		if strings.TrimSpace(body) != "OK" {
			t.Errorf("/healthcheck body %q, want OK", body)
		}
	})
}

// TestMetrics: the Prometheus counters under the names and labels of
// envoyproxy/ratelimit's statsd-exporter mapping.
func TestMetrics(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := startConf(t, k, nil)
		c := s.Client(t)
		hourly(t)
		run(t, c,
			step{h.Req("conf", 0, h.D("met", "a")), "OK: OK 1 2/HOUR"},
			step{h.Req("conf", 0, h.D("met", "a")), "OK: OK 0 2/HOUR"},
			step{h.Req("conf", 0, h.D("met", "a")), "OVER_LIMIT: OVER_LIMIT 0 2/HOUR"},
			step{h.Req("conf", 0, h.D("met", "a")), "OVER_LIMIT: OVER_LIMIT 0 2/HOUR"},
			step{h.Req("conf", 0, h.D("nested", "outer", "inner", "m")), "OK: OK 1 2/HOUR"},
			step{h.Req("conf", 0, h.D("nested", "outer", "inner", "m")), "OK: OK 0 2/HOUR"},
			step{h.Req("conf", 0, h.D("nested", "outer", "inner", "m")), "OVER_LIMIT: OVER_LIMIT 0 2/HOUR"},
			step{h.Req("conf", 0, h.D("shadow", "m")), "OK: OK 0 1/HOUR"},
			step{h.Req("conf", 0, h.D("shadow", "m")), "OK: OK 0 1/HOUR"},
		)
		met := map[string]string{"domain": "conf", "key1": "met"}
		nested := map[string]string{"domain": "conf", "key1": "nested_outer", "key2": "inner"}
		shadow := map[string]string{"domain": "conf", "key1": "shadow"}
		want := []struct {
			name   string
			labels map[string]string
			value  float64
		}{
			{"ratelimit_service_rate_limit_total_hits", met, 4},
			{"ratelimit_service_rate_limit_within_limit", met, 2},
			{"ratelimit_service_rate_limit_over_limit", met, 2},
			// NEAR_LIMIT_RATIO 0.8 of 2 is 1: the second hit is near.
			{"ratelimit_service_rate_limit_near_limit", met, 1},
			// A nested descriptor: key1 the outer key_value, key2 the inner key.
			{"ratelimit_service_rate_limit_total_hits", nested, 3},
			{"ratelimit_service_rate_limit_within_limit", nested, 2},
			{"ratelimit_service_rate_limit_over_limit", nested, 1},
			{"ratelimit_service_rate_limit_total_hits", shadow, 2},
			{"ratelimit_service_rate_limit_shadow_mode", shadow, 1},
		}
		// The incumbent flushes its counters every STATS_FLUSH_INTERVAL
		// (100 ms here): poll until they all show.
		var last string
		h.Poll(t, 30*time.Second, "metrics", func() error {
			text, err := s.Metrics()
			if err != nil {
				return err
			}
			last = text
			ms, err := parseMetrics(text)
			if err != nil {
				return err
			}
			var missing []string
			for _, w := range want {
				if v, ok := sample(ms, w.name, w.labels); !ok || v != w.value {
					missing = append(missing, fmt.Sprintf("%s%v = %v (found %v)", w.name, w.labels, w.value, v))
				}
			}
			if len(missing) > 0 {
				return fmt.Errorf("want\n  %s", strings.Join(missing, "\n  "))
			}
			return nil
		})
		if t.Failed() {
			t.Logf("last metrics:\n%s", grepLines(last, "ratelimit_service_rate_limit"))
		}
	})
}

func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestLiveReload: a rewritten file's limit applies without a restart, the
// window's count carrying over (5 -> 7 per hour, a change the memory
// backend carries over too: named difference 3 in docs/SERVER.md); a
// broken file is refused, logged, and the running config kept; fixing it
// applies again.
func TestLiveReload(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := startConf(t, k, nil)
		c := s.Client(t)
		hourly(t)
		run(t, c, step{h.Req("conf", 0, h.D("five", "r")), "OK: OK 4 5/HOUR"})

		s.WriteConfig(t, "conf.yaml", strings.Replace(confYAML,
			"key: five\n    rate_limit: {unit: hour, requests_per_unit: 5}",
			"key: five\n    rate_limit: {unit: hour, requests_per_unit: 7}\n  - key: probe\n    rate_limit: {unit: hour, requests_per_unit: 1000000}", 1))
		awaitLimit(t, c, "probe", "1000000/HOUR")
		// The hit before the reload still counts.
		run(t, c, step{h.Req("conf", 0, h.D("five", "r")), "OK: OK 5 7/HOUR"})

		logBefore := len(s.Log())
		s.WriteConfig(t, "conf.yaml", "domain: conf\ndescriptors:\n  - key: five\n    rate_limit: {unit: hour, requests_per_unit: [\n")
		h.Poll(t, 30*time.Second, "an error log line about the broken file", func() error {
			if tail := strings.ToLower(s.Log()[logBefore:]); strings.Contains(tail, "error") {
				return nil
			}
			return fmt.Errorf("no line with 'error' in the log since the rewrite")
		})
		run(t, c,
			step{h.Req("conf", 0, h.D("five", "r")), "OK: OK 4 7/HOUR"},
			step{h.Req("conf", 0, h.D("probe", "r")), "OK: OK 999999 1000000/HOUR"},
		)
		code, _, err := s.Get("/healthcheck")
		if err != nil || code != http.StatusOK {
			t.Errorf("/healthcheck after a broken file: %d %v, want 200", code, err)
		}

		s.WriteConfig(t, "conf.yaml", strings.Replace(confYAML, "- key: one\n", "- key: probe\n    rate_limit: {unit: hour, requests_per_unit: 7}\n  - key: one\n", 1))
		awaitLimit(t, c, "probe", "7/HOUR")
		// Four hits in the window so far, under the old limit again.
		run(t, c, step{h.Req("conf", 0, h.D("five", "r")), "OK: OK 1 5/HOUR"})
	})
}

// TestReloadNewStateWidth shows named difference 3: a limit changed from 3
// to 7 per hour keeps its count on the incumbent (its counter is keyed by
// descriptor and window) and on Redis; ratecell-server's memory backend
// starts the rule afresh when the library cannot carry the state over.
func TestReloadNewStateWidth(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := h.Start(t, h.Options{Kind: k, Configs: map[string]string{"conf.yaml": confYAML + "  - key: three\n    rate_limit: {unit: hour, requests_per_unit: 3}\n"}})
		c := s.Client(t)
		hourly(t)
		run(t, c,
			step{h.Req("conf", 0, h.D("three", "w")), "OK: OK 2 3/HOUR"},
			step{h.Req("conf", 0, h.D("three", "w")), "OK: OK 1 3/HOUR"},
		)
		s.WriteConfig(t, "conf.yaml", confYAML+"  - key: three\n    rate_limit: {unit: hour, requests_per_unit: 7}\n")
		awaitLimit(t, c, "three", "7/HOUR")
		// awaitLimit's polls used other values of "three": w still has its 2.
		want := "OK: OK 4 7/HOUR"
		if k == h.Memory {
			want = "OK: OK 6 7/HOUR"
		}
		run(t, c, step{h.Req("conf", 0, h.D("three", "w")), want})
	})
}

// awaitLimit polls with a descriptor of key (each poll a new value, so the
// polls count on no limit the test reads) until its current_limit is limit.
func awaitLimit(t *testing.T, c *h.Client, key, limit string) {
	t.Helper()
	n := 0
	h.Poll(t, 30*time.Second, "the reloaded config", func() error {
		n++
		resp := c.Check(t, h.Req("conf", 0, h.D(key, fmt.Sprintf("poll%d", n))))
		if got := h.Statuses(resp)[0].Limit; got != limit {
			return fmt.Errorf("%s has limit %q, want %q", key, got, limit)
		}
		return nil
	})
}

// TestResponseHeaders: LIMIT_RESPONSE_HEADERS_ENABLED adds the limit,
// remaining and reset headers of the descriptor closest to its limit, under
// the configured names.
func TestResponseHeaders(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startConf(t, k, map[string]string{
			"LIMIT_RESPONSE_HEADERS_ENABLED": "true",
			"LIMIT_REMAINING_HEADER":         "X-Left",
		}).Client(t)
		h.FreshWindow(t, time.Minute, 10*time.Second)
		for i, rem := range []string{"2", "1", "0", "0"} {
			before := time.Now().Unix()
			resp := c.Check(t, h.Req("conf", 0, h.D("hdr", "a"), h.D("five", "hdr")))
			after := time.Now().Unix()
			got := map[string]string{}
			for _, hv := range resp.ResponseHeadersToAdd {
				got[hv.Key] = hv.Value
			}
			if got["RateLimit-Limit"] != "3" || got["X-Left"] != rem {
				t.Errorf("request %d: headers %v, want RateLimit-Limit 3 and X-Left %s", i+1, got, rem)
			}
			lo, hi := 60-after%60, 60-before%60
			var reset int64
			if _, err := fmt.Sscan(got["RateLimit-Reset"], &reset); err != nil || reset < lo || reset > hi {
				t.Errorf("request %d: RateLimit-Reset %q, want seconds in [%d, %d]", i+1, got["RateLimit-Reset"], lo, hi)
			}
		}
		// Off by default.
		plain := startConf(t, k, nil).Client(t)
		if resp := plain.Check(t, h.Req("conf", 0, h.D("hdr", "b"))); len(resp.ResponseHeadersToAdd) != 0 {
			t.Errorf("headers without LIMIT_RESPONSE_HEADERS_ENABLED: %v", resp.ResponseHeadersToAdd)
		}
	})
}
