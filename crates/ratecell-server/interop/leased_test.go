package interop

import (
	"testing"
	"time"

	h "github.com/ratecell/ratecell-server/interop/harness"
)

const leaseYAML = `domain: lease
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100}
`

// TestReplicasShareOneLimit: two replicas on one Redis, requests
// alternating between them, admit exactly the limit in each of two
// consecutive minutes; the Redis commands per request are logged. Against
// ratecell-server in leased mode (RATECELL_REDIS_MODE=leased), and against
// the incumbent, whose every request is an INCRBY, as the baseline.
func TestReplicasShareOneLimit(t *testing.T) {
	t.Parallel()
	var kinds []h.Kind
	if h.Enabled(h.Incumbent) {
		kinds = append(kinds, h.Incumbent)
	}
	if h.Enabled(h.Memory) || h.Enabled(h.Strict) || h.Enabled(h.Leased) {
		kinds = append(kinds, h.Leased)
	}
	for _, k := range kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			_, module := k.NeedsRedis()
			modulePath := ""
			if module {
				modulePath = h.RatecellModule()
			}
			redis := h.StartRedis(t, modulePath)
			opts := h.Options{Kind: k, Redis: redis, Configs: map[string]string{"lease.yaml": leaseYAML}}
			clients := []*h.Client{h.Start(t, opts).Client(t), h.Start(t, opts).Client(t)}
			const limit, requests = 100, 250
			window := 0
			for attempt := 0; window < 2; attempt++ {
				if attempt == 4 {
					t.Fatal("four windows in a row were too short for the requests")
				}
				if attempt == 0 {
					h.FreshWindow(t, time.Minute, 15*time.Second)
				} else {
					// Wait for the next minute.
					h.FreshWindow(t, time.Minute, time.Minute)
				}
				before, err := redis.CommandStats()
				if err != nil {
					t.Fatal(err)
				}
				started := time.Now().Truncate(time.Minute)
				admitted := [2]int{}
				for i := range requests {
					resp := clients[i%2].Check(t, h.Req("lease", 0, h.D("k", "shared")))
					if resp.OverallCode.String() == "OK" {
						admitted[i%2]++
					}
				}
				if !time.Now().Truncate(time.Minute).Equal(started) {
					// A machine too busy to send 250 requests in 15 s: the
					// counts span two windows and say nothing; try a fresh one.
					t.Logf("window %d: the requests spanned a minute boundary (admitted %v); again in the next minute", window, admitted)
					continue
				}
				after, err := redis.CommandStats()
				if err != nil {
					t.Fatal(err)
				}
				d := after.Sub(before)
				t.Logf("%s window %d: admitted %d (replica 0: %d, replica 1: %d) of %d; Redis: %d commands, %.3f per request (%s)",
					k, window, admitted[0]+admitted[1], admitted[0], admitted[1], requests, d.Total(), float64(d.Total())/requests, d)
				if admitted[0]+admitted[1] != limit {
					t.Errorf("window %d: %d admitted across both replicas, want exactly %d", window, admitted[0]+admitted[1], limit)
				}
				window++
			}
		})
	}
}

// TestLeasedDescriptorOrder shows named difference 1's leased variant: a
// leased replica decides a request's descriptors in order and stops at the
// first denial, so the descriptors before it are counted and those after
// it are not.
func TestLeasedDescriptorOrder(t *testing.T) {
	t.Parallel()
	if !h.Enabled(h.Memory) && !h.Enabled(h.Strict) && !h.Enabled(h.Leased) {
		t.Skip("no ratecell-server kind in INTEROP_SERVERS")
	}
	c := startConf(t, h.Leased, nil).Client(t)
	hourly(t)
	if got := brief(c.Check(t, h.Req("conf", 0, h.D("one", "o")))); got[:2] != "OK" {
		t.Fatalf("one=o alone: %s, want OK", got)
	}
	for i := range 2 {
		if resp := c.Check(t, h.Req("conf", 0, h.D("five", "o"), h.D("one", "o"))); resp.OverallCode.String() != "OVER_LIMIT" {
			t.Errorf("[five=o][one=o] %d: %s, want OVER_LIMIT", i+1, brief(resp))
		}
		if resp := c.Check(t, h.Req("conf", 0, h.D("one", "o"), h.D("five", "o"))); resp.OverallCode.String() != "OVER_LIMIT" {
			t.Errorf("[one=o][five=o] %d: %s, want OVER_LIMIT", i+1, brief(resp))
		}
	}
	admitted := 0
	for range 6 {
		if c.Check(t, h.Req("conf", 0, h.D("five", "o"))).OverallCode.String() == "OK" {
			admitted++
		}
	}
	// five=o was counted by the two requests where it came first.
	if admitted != 3 {
		t.Errorf("five=o alone: %d of 6 admitted, want 3 (5 less the 2 denied requests where it came before one=o)", admitted)
	}
}
