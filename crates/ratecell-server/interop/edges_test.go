package interop

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	h "github.com/ratecell/ratecell-server/interop/harness"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// edgeCasesYAML holds the corners of envoyproxy/ratelimit's configuration.
const edgeCasesYAML = `domain: edges
descriptors:
  - key: zero
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: det
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: day
    rate_limit: {unit: day, requests_per_unit: 4}
  - key: l1
    value: a
    descriptors:
      - key: l2
        value: "b*"
        descriptors:
          - key: l3
            rate_limit: {unit: hour, requests_per_unit: 2}
  - key: sw
    value: "t*"
    share_threshold: true
    descriptors:
      - key: sub
        rate_limit: {unit: hour, requests_per_unit: 2}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: five
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: one
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: many
    rate_limit: {unit: hour, requests_per_unit: 500}
`

func startEdges(t *testing.T, k h.Kind, env map[string]string) *h.Server {
	return h.Start(t, h.Options{Kind: k, Configs: map[string]string{"edges.yaml": edgeCasesYAML}, Env: env})
}

// TestEdgeCases: a zero limit, a zero per-descriptor hits_addend (a check
// that takes nothing), a day limit's reset, three levels with a wildcard
// in the middle, share_threshold above nested descriptors, and odd values.
func TestEdgeCases(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startEdges(t, k, nil).Client(t)
		hourly(t)
		run(t, c,
			step{h.Req("edges", 0, h.D("zero", "a")), "OVER_LIMIT: OVER_LIMIT 0 0/HOUR"},
			// hits_addend 0 on a descriptor: checked, not counted.
			step{h.Req("edges", 0, h.DHits(0, "five", "peek")), "OK: OK 5 5/HOUR"},
			step{h.Req("edges", 4, h.D("five", "peek")), "OK: OK 1 5/HOUR"},
			step{h.Req("edges", 0, h.DHits(0, "five", "peek")), "OK: OK 1 5/HOUR"},
			step{h.Req("edges", 0, h.D("five", "peek")), "OK: OK 0 5/HOUR"},
			// At the limit, a check of nothing still fits.
			step{h.Req("edges", 0, h.DHits(0, "five", "peek")), "OK: OK 0 5/HOUR"},
			step{h.Req("edges", 0, h.D("five", "peek")), "OVER_LIMIT: OVER_LIMIT 0 5/HOUR"},
			// Three levels, the middle one a wildcard.
			step{h.Req("edges", 0, h.D("l1", "a", "l2", "bee", "l3", "x")), "OK: OK 1 2/HOUR"},
			step{h.Req("edges", 0, h.D("l1", "a", "l2", "bee", "l3", "x")), "OK: OK 0 2/HOUR"},
			step{h.Req("edges", 0, h.D("l1", "a", "l2", "bee", "l3", "x")), "OVER_LIMIT: OVER_LIMIT 0 2/HOUR"},
			step{h.Req("edges", 0, h.D("l1", "a", "l2", "bzz", "l3", "x")), "OK: OK 1 2/HOUR"},
			step{h.Req("edges", 0, h.D("l1", "a", "l2", "cee", "l3", "x")), "OK: OK 0 -"},
			// share_threshold at the wildcard level, the limit one level down:
			// every t* value shares the sub counter.
			step{h.Req("edges", 0, h.D("sw", "t1", "sub", "s")), "OK: OK 1 2/HOUR"},
			step{h.Req("edges", 0, h.D("sw", "t2", "sub", "s")), "OK: OK 0 2/HOUR"},
			step{h.Req("edges", 0, h.D("sw", "t3", "sub", "s")), "OVER_LIMIT: OVER_LIMIT 0 2/HOUR"},
			// Values the incumbent's cache keys and stats names must survive.
			step{h.Req("edges", 0, h.D("five", "")), "OK: OK 4 5/HOUR"},
			step{h.Req("edges", 0, h.D("five", "with space/and.dots:colons")), "OK: OK 4 5/HOUR"},
			step{h.Req("edges", 0, h.D("five", "ünïcödé")), "OK: OK 4 5/HOUR"},
			step{h.Req("edges", 0, h.D("five", "ünïcödé")), "OK: OK 3 5/HOUR"},
		)
		before := time.Now().Unix()
		resp := c.Check(t, h.Req("edges", 0, h.D("day", "a")))
		after := time.Now().Unix()
		if got := brief(resp); got != "OK: OK 3 4/DAY" {
			t.Errorf("day=a: got %s, want OK: OK 3 4/DAY", got)
		}
		const day = 86400
		if r := resp.Statuses[0].DurationUntilReset; r == nil || r.Seconds < day-after%day || r.Seconds > day-before%day {
			t.Errorf("day=a: duration_until_reset %v, want seconds in [%d, %d]", r, day-after%day, day-before%day)
		}
	})
}

// TestShadowInSeveralDescriptors: a shadow_mode limit over its count does
// not deny, so a request with it and another descriptor is admitted and
// counted on the other one, on both servers.
func TestShadowInSeveralDescriptors(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startEdges(t, k, nil).Client(t)
		hourly(t)
		run(t, c,
			step{h.Req("edges", 0, h.D("shadow", "z"), h.D("five", "z")), "OK: OK 0 1/HOUR; OK 4 5/HOUR"},
			step{h.Req("edges", 0, h.D("shadow", "z"), h.D("five", "z")), "OK: OK 0 1/HOUR; OK 3 5/HOUR"},
			step{h.Req("edges", 0, h.D("five", "z")), "OK: OK 2 5/HOUR"},
		)
	})
}

// TestGlobalShadowModeSeveralDescriptors: with SHADOW_MODE=true a request
// over one limit is answered OK. The incumbent counts it on every
// descriptor; ratecell-server counts it "as if it had been enforced"
// (SPEC §9), that is on none, all or nothing.
func TestGlobalShadowModeSeveralDescriptors(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startEdges(t, k, map[string]string{"SHADOW_MODE": "true"}).Client(t)
		hourly(t)
		run(t, c,
			step{h.Req("edges", 0, h.D("one", "g"), h.D("five", "g")), "OK: OK 0 1/HOUR; OK 4 5/HOUR"},
		)
		resp := c.Check(t, h.Req("edges", 0, h.D("one", "g"), h.D("five", "g")))
		if resp.OverallCode.String() != "OK" || resp.Statuses[0].Code.String() != "OVER_LIMIT" {
			t.Errorf("second request: got %s, want overall OK with one=g OVER_LIMIT", brief(resp))
		}
		want := "OK: OK 2 5/HOUR"
		if k.Ratecell() {
			want = "OK: OK 3 5/HOUR"
		}
		run(t, c, step{h.Req("edges", 0, h.D("five", "g")), want})
	})
}

// TestSameCounterTwice: two descriptors of one request on the same counter.
// The incumbent increments it once per descriptor, each status seeing its
// own increment; ratecell-server asks for the sum of their costs at once
// (SPEC §9), all or nothing.
func TestSameCounterTwice(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startEdges(t, k, nil).Client(t)
		hourly(t)
		first := c.Check(t, h.Req("edges", 0, h.D("five", "dup"), h.D("five", "dup")))
		t.Logf("%s: [five=dup][five=dup]: %s", k, brief(first))
		if first.OverallCode.String() != "OK" {
			t.Errorf("[five=dup][five=dup]: %s, want OK", brief(first))
		}
		run(t, c, step{h.Req("edges", 0, h.D("five", "dup")), "OK: OK 2 5/HOUR"})
		// 3 + 3 on a limit of 5: denied on both servers.
		denied := c.Check(t, h.Req("edges", 3, h.D("five", "dup2"), h.D("five", "dup2")))
		t.Logf("%s: [five=dup2][five=dup2] hits 3: %s", k, brief(denied))
		if denied.OverallCode.String() != "OVER_LIMIT" {
			t.Errorf("[five=dup2][five=dup2] hits 3: %s, want OVER_LIMIT", brief(denied))
		}
		// ratecell: one counter asked for 6 of 5 denies both descriptors,
		// the same on every backend (the memory backend's answer).
		if k.Ratecell() && brief(denied) != "OVER_LIMIT: OVER_LIMIT 0 5/HOUR; OVER_LIMIT 0 5/HOUR" {
			t.Errorf("[five=dup2][five=dup2] hits 3: %s, want both descriptors OVER_LIMIT 0 (the sum of their costs is over the limit)", brief(denied))
		}
		want := "OVER_LIMIT: OVER_LIMIT 0 5/HOUR" // the incumbent counted 6
		if k.Ratecell() {
			want = "OK: OK 4 5/HOUR" // ratecell counted nothing
		}
		run(t, c, step{h.Req("edges", 0, h.D("five", "dup2")), want})
	})
}

// TestInvalidRequests: an empty domain or no descriptors is an error:
// UNKNOWN from the incumbent, INVALID_ARGUMENT from ratecell-server (named
// difference 4).
func TestInvalidRequests(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startEdges(t, k, nil).Client(t)
		for _, r := range []*rls.RateLimitRequest{h.Req("", 0, h.D("five", "x")), h.Req("edges", 0)} {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			resp, err := c.Call(ctx, r)
			cancel()
			want := codes.InvalidArgument
			if !k.Ratecell() {
				want = codes.Unknown
			}
			if err == nil {
				t.Errorf("%s: answered %s, want an error", h.Show(r), brief(resp))
			} else if got := status.Code(err); got != want {
				t.Errorf("%s: error %v, want code %v", h.Show(r), err, want)
			}
		}
	})
}

// TestDetailedMetric: detailed_metric names the counter by the full
// descriptor, value included.
func TestDetailedMetric(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := startEdges(t, k, nil)
		hourly(t)
		run(t, s.Client(t),
			step{h.Req("edges", 0, h.D("det", "foo")), "OK: OK 1 2/HOUR"},
			step{h.Req("edges", 0, h.D("det", "foo")), "OK: OK 0 2/HOUR"},
			step{h.Req("edges", 0, h.D("det", "bar")), "OK: OK 1 2/HOUR"},
		)
		h.Poll(t, 30*time.Second, "detailed metrics", func() error {
			text, err := s.Metrics()
			if err != nil {
				return err
			}
			ms, err := parseMetrics(text)
			if err != nil {
				return err
			}
			for value, want := range map[string]float64{"det_foo": 2, "det_bar": 1} {
				if v, ok := sample(ms, "ratelimit_service_rate_limit_total_hits", map[string]string{"domain": "edges", "key1": value}); !ok || v != want {
					return fmt.Errorf("total_hits{edges,%s} = %v (found %v), want %v; have:\n%s", value, v, ok, want, grepLines(text, "edges"))
				}
			}
			return nil
		})
	})
}

// TestConfigFilesAddedAndRemoved: a new file's domain applies, a removed
// file's domain is gone.
func TestConfigFilesAddedAndRemoved(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := startEdges(t, k, nil)
		c := s.Client(t)
		s.WriteConfig(t, "extra.yaml", "domain: extra\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 9}\n")
		n := 0
		h.Poll(t, 30*time.Second, "the new domain", func() error {
			n++
			if got := h.Statuses(c.Check(t, h.Req("extra", 0, h.D("k", fmt.Sprint(n)))))[0].Limit; got != "9/HOUR" {
				return fmt.Errorf("extra's limit %q", got)
			}
			return nil
		})
		s.RemoveConfig(t, "extra.yaml")
		h.Poll(t, 30*time.Second, "the removed domain", func() error {
			n++
			if got := h.Statuses(c.Check(t, h.Req("extra", 0, h.D("k", fmt.Sprint(n)))))[0].Limit; got != "" {
				return fmt.Errorf("extra's limit still %q", got)
			}
			return nil
		})
		// The remaining file is untouched.
		run(t, c, step{h.Req("edges", 0, h.D("five", "still")), "OK: OK 4 5/HOUR"})
	})
}

// TestConcurrentExactCount: 16 clients, each on its own connection, send
// 800 requests at once on a limit of 500: exactly 500 are admitted.
func TestConcurrentExactCount(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := startEdges(t, k, nil)
		hourly(t)
		clients := make([]*h.Client, 16)
		for i := range clients {
			clients[i] = h.Dial(t, s.GRPCAddr)
		}
		var mu sync.Mutex
		admitted, errs := 0, 0
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					resp, err := c.Call(ctx, h.Req("edges", 0, h.D("many", "c")))
					cancel()
					mu.Lock()
					if err != nil {
						errs++
					} else if resp.OverallCode.String() == "OK" {
						admitted++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if admitted != 500 || errs != 0 {
			t.Errorf("800 concurrent requests on 500/hour: %d admitted, %d errors; want 500 and 0", admitted, errs)
		}
	})
}

// TestJSONContentType: /json answers application/json.
func TestJSONContentType(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := startEdges(t, k, nil)
		req, _ := http.NewRequest("POST", s.HTTP+"/json", strings.NewReader(`{"domain":"edges","descriptors":[{"entries":[{"key":"five","value":"ct"}]}]}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("/json Content-Type %q, want application/json", ct)
		}
	})
}

// TestNearLimitRatio: NEAR_LIMIT_RATIO=0.5 on 10/hour: the hits past the
// fifth are near the limit.
func TestNearLimitRatio(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := h.Start(t, h.Options{Kind: k, Env: map[string]string{"NEAR_LIMIT_RATIO": "0.5"}, Configs: map[string]string{
			"near.yaml": "domain: near\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n",
		}})
		c := s.Client(t)
		hourly(t)
		for range 7 {
			c.Check(t, h.Req("near", 0, h.D("k", "v")))
		}
		h.Poll(t, 30*time.Second, "near_limit", func() error {
			text, err := s.Metrics()
			if err != nil {
				return err
			}
			ms, err := parseMetrics(text)
			if err != nil {
				return err
			}
			labels := map[string]string{"domain": "near", "key1": "k"}
			near, _ := sample(ms, "ratelimit_service_rate_limit_near_limit", labels)
			total, _ := sample(ms, "ratelimit_service_rate_limit_total_hits", labels)
			if near != 2 || total != 7 {
				return fmt.Errorf("near_limit %v, total_hits %v; want 2 and 7", near, total)
			}
			return nil
		})
	})
}

// TestHugeHitsAddend: hits_addend 2^32-1 is denied without harm; after it
// the incumbent's counter is past the limit for the window, ratecell's
// untouched (named difference 2).
func TestHugeHitsAddend(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startEdges(t, k, nil).Client(t)
		hourly(t)
		run(t, c, step{h.Req("edges", ^uint32(0), h.D("five", "huge")), "OVER_LIMIT: OVER_LIMIT 0 5/HOUR"})
		want := "OVER_LIMIT: OVER_LIMIT 0 5/HOUR"
		if k.Ratecell() {
			want = "OK: OK 4 5/HOUR"
		}
		run(t, c, step{h.Req("edges", 0, h.D("five", "huge")), want})
	})
}

// TestJSONHitsAddend: /json takes hitsAddend and per-descriptor hitsAddend.
func TestJSONHitsAddend(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := startEdges(t, k, nil)
		hourly(t)
		for i, c := range []struct{ body, want string }{
			{`{"domain":"edges","hitsAddend":3,"descriptors":[{"entries":[{"key":"five","value":"jh"}]}]}`, "OK: OK 2 5/HOUR"},
			{`{"domain":"edges","descriptors":[{"entries":[{"key":"five","value":"jh"}],"hitsAddend":"2"}]}`, "OK: OK 0 5/HOUR"},
		} {
			code, text, err := s.Post("/json", c.body)
			if err != nil || code != http.StatusOK {
				t.Fatalf("POST %d: %d %v %s", i+1, code, err, text)
			}
			var resp rls.RateLimitResponse
			if err := protojson.Unmarshal([]byte(text), &resp); err != nil {
				t.Fatalf("POST %d: %v\n%s", i+1, err, text)
			}
			if got := brief(&resp); got != c.want {
				t.Errorf("POST %d %s: got %s, want %s", i+1, c.body, got, c.want)
			}
		}
		// No descriptors: a client error.
		if code, text, _ := s.Post("/json", `{"domain":"edges","descriptors":[]}`); code < 400 || code >= 500 {
			t.Errorf("POST without descriptors: %d %s, want a 4xx", code, text)
		}
	})
}

// TestConfigLoadMetrics: the config load counters count a good and a
// refused reload.
func TestConfigLoadMetrics(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := startEdges(t, k, nil)
		read := func() (ok, bad float64, err error) {
			text, err := s.Metrics()
			if err != nil {
				return 0, 0, err
			}
			ms, err := parseMetrics(text)
			if err != nil {
				return 0, 0, err
			}
			ok, _ = sample(ms, "ratelimit_service_config_load_success", nil)
			bad, _ = sample(ms, "ratelimit_service_config_load_error", nil)
			return ok, bad, nil
		}
		var ok0 float64
		h.Poll(t, 30*time.Second, "config_load_success after the start", func() error {
			ok, _, err := read()
			if err != nil {
				return err
			}
			if ok < 1 {
				return fmt.Errorf("config_load_success %v", ok)
			}
			ok0 = ok
			return nil
		})
		s.WriteConfig(t, "edges.yaml", "domain: edges\ndescriptors: [ {\n")
		h.Poll(t, 30*time.Second, "config_load_error after a broken file", func() error {
			_, bad, err := read()
			if err != nil {
				return err
			}
			if bad != 1 {
				return fmt.Errorf("config_load_error %v, want 1", bad)
			}
			return nil
		})
		s.WriteConfig(t, "edges.yaml", edgeCasesYAML)
		h.Poll(t, 30*time.Second, "config_load_success after the fix", func() error {
			ok, _, err := read()
			if err != nil {
				return err
			}
			if ok != ok0+1 {
				return fmt.Errorf("config_load_success %v, want %v", ok, ok0+1)
			}
			return nil
		})
	})
}
