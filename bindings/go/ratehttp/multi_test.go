package ratehttp_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratecell "github.com/ratecell/ratecell-go"
	"github.com/ratecell/ratecell-go/ratehttp"
)

// clockedMulti is a multi-limit limiter on an explicit clock.
type clockedMulti struct {
	l   *ratecell.Limiter
	now *atomic.Uint64
}

func (c clockedMulti) CheckEach(r ratecell.Request) (ratecell.MultiDecision, error) {
	r.At = c.now.Load()
	return c.l.CheckEach(r)
}

func problem(violated string) string {
	return `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota exceeded","status":429,"violated-policies":[` + violated + `]}`
}

// "burst" 3 per second and "daily" 5 per hour, fixed windows: at t0 the
// second has 0.5 s left and the hour 2797.5 s (1_700_000_000 s is 800 s
// into its hour).
func TestTwoNamedLimitsOneItemEachAndAllOrNothing(t *testing.T) {
	l, err := ratecell.NewWith(ratecell.Options{Limits: []ratecell.Limit{
		{Name: "burst", Config: ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 3, Period: time.Second, Capacity: 1024}},
		{Name: "daily", Config: ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 5, Period: time.Hour, Capacity: 1024}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	// The names come from the limiter; the test decides on its own clock.
	now := new(atomic.Uint64)
	now.Store(t0)
	limits, err := ratehttp.Multi([]ratehttp.Policy{
		{Name: l.LimitName(0), Limit: 3, Period: time.Second},
		{Name: l.LimitName(1), Limit: 5, Period: time.Hour},
	}, clockedMulti{l, now})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, limits, ratehttp.Options{})
	policy := `"burst";q=3;w=1, "daily";q=5;w=3600`

	for _, want := range []string{
		`"burst";r=2;t=1, "daily";r=4;t=2798`,
		`"burst";r=1;t=1, "daily";r=3;t=2798`,
		`"burst";r=0;t=1, "daily";r=2;t=2798`,
	} {
		r := get(t, srv, "/")
		if r.status != 200 {
			t.Fatalf("status %d", r.status)
		}
		expect(t, "policy", r.header.Get("RateLimit-Policy"), policy)
		expect(t, "ratelimit", r.header.Get("RateLimit"), want)
	}
	// "burst" refuses; "daily" would admit and is not charged (r stays 2).
	r := get(t, srv, "/")
	if r.status != 429 {
		t.Fatalf("status %d", r.status)
	}
	expect(t, "retry-after", r.header.Get("Retry-After"), "1")
	expect(t, "policy", r.header.Get("RateLimit-Policy"), policy)
	expect(t, "ratelimit", r.header.Get("RateLimit"), `"burst";r=0;t=1, "daily";r=2;t=2798`)
	expect(t, "body", r.body, problem(`"burst"`))

	// The next second: "burst" is fresh, "daily" has its 2 left and 2797 s.
	now.Add(500_000_000)
	for _, want := range []string{
		`"burst";r=2;t=1, "daily";r=1;t=2797`,
		`"burst";r=1;t=1, "daily";r=0;t=2797`,
	} {
		r := get(t, srv, "/")
		if r.status != 200 {
			t.Fatalf("status %d", r.status)
		}
		expect(t, "ratelimit", r.header.Get("RateLimit"), want)
	}
	// "daily" refuses; "burst" is not charged (r stays 1), twice.
	for range 2 {
		r = get(t, srv, "/")
		if r.status != 429 {
			t.Fatalf("status %d", r.status)
		}
		expect(t, "retry-after", r.header.Get("Retry-After"), "2797")
		expect(t, "ratelimit", r.header.Get("RateLimit"), `"burst";r=1;t=1, "daily";r=0;t=2797`)
		expect(t, "body", r.body, problem(`"daily"`))
	}
	st, err := l.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Allowed != 5 || st.Denied != 3 {
		t.Fatalf("stats: %+v", st)
	}
}

// FromMulti on the limiter's own clock: both limits spent by two requests,
// the third is refused by both and both are listed.
func TestFromMultiBothRefusingAreBothListed(t *testing.T) {
	l, err := ratecell.NewWith(ratecell.Options{Limits: []ratecell.Limit{
		{Name: "minute", Config: ratecell.Config{Algorithm: ratecell.SlidingLog, Limit: 2, Period: time.Minute, Capacity: 64}},
		{Name: "hour", Config: ratecell.Config{Algorithm: ratecell.SlidingLog, Limit: 2, Period: time.Hour, Capacity: 64}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	limits, err := ratehttp.FromMulti(l)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, limits, ratehttp.Options{})
	for range 2 {
		if r := get(t, srv, "/"); r.status != 200 {
			t.Fatalf("status %d", r.status)
		}
	}
	r := get(t, srv, "/")
	if r.status != 429 {
		t.Fatalf("status %d", r.status)
	}
	expect(t, "policy", r.header.Get("RateLimit-Policy"), `"minute";q=2;w=60, "hour";q=2;w=3600`)
	// A sliding log frees its oldest entry one period after it: the hour's
	// wait, just under 3600 s, is the longer, rounded up.
	expect(t, "retry-after", r.header.Get("Retry-After"), "3600")
	expect(t, "body", r.body, problem(`"minute","hour"`))
}

func TestMultiPoliciesAreChecked(t *testing.T) {
	two := []ratehttp.Policy{{Name: "a", Limit: 1, Period: time.Second}, {Limit: 1, Period: time.Hour}}
	cases := map[string][]ratehttp.Policy{
		"limit 1 has no name": two,
		"names must differ":   {two[0], {Name: "a", Limit: 2, Period: time.Hour}},
		"policy name":         {two[0], {Name: "caf\u00e9", Limit: 2, Period: time.Hour}},
		"no policies":         nil,
	}
	for want, policies := range cases {
		if _, err := ratehttp.Multi(policies, clockedMulti{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%v: got %v, want an error with %q", policies, err, want)
		}
	}
	one, err := ratehttp.CheckPolicies([]ratehttp.Policy{{Limit: 1, Period: time.Second}})
	if err != nil || one[0].Name != ratehttp.DefaultName {
		t.Fatalf("a lone unnamed limit: %v %v", one, err)
	}
}

// plainLimits hides a Limits' PolicyField: the middleware then builds the
// field from each request's items.
type plainLimits struct{ ratehttp.Limits }

func TestALimitsWithoutAFixedPolicyGetsItsFieldPerRequest(t *testing.T) {
	limits, _, _ := newLimits(t, "api", ratecell.FixedWindow, 3, 10*time.Second)
	srv := serve(t, plainLimits{limits}, ratehttp.Options{})
	r := get(t, srv, "/")
	expect(t, "policy", r.header.Get("RateLimit-Policy"), `"api";q=3;w=10`)
	expect(t, "ratelimit", r.header.Get("RateLimit"), `"api";r=2;t=8`)
}
