package ratecellredis

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratecell "github.com/ratecell/ratecell-go"
	"github.com/ratecell/ratecell-go/ratehttp"
)

// 1_700_000_000 s is 800 s into its hour: at httpT0 a 1 s window has 0.5 s
// left and an hour 2797.5 s.
const httpT0 = uint64(1_700_000_000)*uint64(time.Second) + 2_500_000_000

type httpReply struct {
	status int
	header http.Header
	body   string
}

func httpGet(t *testing.T, srv *httptest.Server, apiKey string) httpReply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if apiKey != "" {
		req.Header.Set("X-Api-Key", apiKey)
	}
	c := srv.Client()
	c.Timeout = 20 * time.Second
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return httpReply{res.StatusCode, res.Header, string(body)}
}

func serveHTTP(t *testing.T, limits ratehttp.Limits, opts ratehttp.Options) *httptest.Server {
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello") })
	srv := httptest.NewServer(ratehttp.Middleware(limits, opts)(hello))
	t.Cleanup(srv.Close)
	return srv
}

func want(t *testing.T, what, got, expected string) {
	t.Helper()
	if got != expected {
		t.Fatalf("%s: got %q, want %q", what, got, expected)
	}
}

func TestHTTPTwoNamedLimitsInRedisAllOrNothing(t *testing.T) {
	c := client(t)
	now := new(atomic.Uint64)
	now.Store(httpT0)
	limits, err := NewHTTPLimits(c, []Named{
		{Name: "burst", Limiter: New(c, ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 3, Period: time.Second}).WithPrefix("rl:")},
		{Name: "daily", Limiter: New(c, ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 5, Period: time.Hour}).WithPrefix("rl:")},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveHTTP(t, limits.WithClock(now.Load), ratehttp.Options{Key: ratehttp.Header("X-Api-Key")})
	policy := `"burst";q=3;w=1, "daily";q=5;w=3600`
	for _, rl := range []string{
		`"burst";r=2;t=1, "daily";r=4;t=2798`,
		`"burst";r=1;t=1, "daily";r=3;t=2798`,
		`"burst";r=0;t=1, "daily";r=2;t=2798`,
	} {
		r := httpGet(t, srv, "alice")
		if r.status != 200 {
			t.Fatalf("status %d %s", r.status, r.body)
		}
		want(t, "policy", r.header.Get("RateLimit-Policy"), policy)
		want(t, "ratelimit", r.header.Get("RateLimit"), rl)
	}
	// "burst" refuses; "daily" is not charged.
	r := httpGet(t, srv, "alice")
	if r.status != 429 {
		t.Fatalf("status %d", r.status)
	}
	want(t, "retry-after", r.header.Get("Retry-After"), "1")
	want(t, "ratelimit", r.header.Get("RateLimit"), `"burst";r=0;t=1, "daily";r=2;t=2798`)
	want(t, "body", r.body, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota exceeded","status":429,"violated-policies":["burst"]}`)
	now.Add(500_000_000)
	for _, rl := range []string{`"burst";r=2;t=1, "daily";r=1;t=2797`, `"burst";r=1;t=1, "daily";r=0;t=2797`} {
		r := httpGet(t, srv, "alice")
		if r.status != 200 {
			t.Fatalf("status %d", r.status)
		}
		want(t, "ratelimit", r.header.Get("RateLimit"), rl)
	}
	// "daily" refuses; "burst" is not charged (r stays 1).
	r = httpGet(t, srv, "alice")
	if r.status != 429 {
		t.Fatalf("status %d", r.status)
	}
	want(t, "retry-after", r.header.Get("Retry-After"), "2797")
	want(t, "ratelimit", r.header.Get("RateLimit"), `"burst";r=1;t=1, "daily";r=0;t=2797`)
	if !strings.HasSuffix(r.body, `"violated-policies":["daily"]}`) {
		t.Fatal(r.body)
	}
	if r := httpGet(t, srv, "bob"); r.status != 200 {
		t.Fatalf("another key: %d", r.status)
	}
	keys, err := c.Keys(context.Background(), "rl:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	want(t, "keys", strings.Join(keys, " "), "rl:{alice}:burst rl:{alice}:daily rl:{bob}:burst rl:{bob}:daily")
}

func TestHTTPOneLimitOnTheServerClockAndErrors(t *testing.T) {
	c := client(t)
	limits, err := NewHTTPLimits(c, []Named{{Limiter: New(c, ratecell.Config{Algorithm: ratecell.GCRA, Limit: 2, Period: time.Minute})}})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveHTTP(t, limits, ratehttp.Options{})
	r := httpGet(t, srv, "")
	want(t, "policy", r.header.Get("RateLimit-Policy"), `"default";q=2;w=60`)
	want(t, "ratelimit", r.header.Get("RateLimit"), `"default";r=1;t=30`)
	if r := httpGet(t, srv, ""); r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	r = httpGet(t, srv, "")
	if r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("third request: %d %v", r.status, r.header)
	}
	// One limit is RATECELL.CHECK on the limiter's key: the client's address.
	if n, err := c.Exists(context.Background(), "127.0.0.1").Result(); err != nil || n != 1 {
		t.Fatalf("key 127.0.0.1: %d %v", n, err)
	}

	// A limit the module refuses: the middleware fails closed (503).
	bad, err := NewHTTPLimits(c, []Named{{Name: "x", Limiter: New(c, ratecell.Config{Algorithm: ratecell.GCRA, Period: time.Second})}})
	if err != nil {
		t.Fatal(err)
	}
	if r := httpGet(t, serveHTTP(t, bad, ratehttp.Options{}), ""); r.status != 503 {
		t.Fatalf("bad limit: %d", r.status)
	}
	one := New(c, ratecell.Config{Algorithm: ratecell.GCRA, Limit: 1, Period: time.Second})
	for wantErr, named := range map[string][]Named{
		"limit 1 has no name": {{Name: "a", Limiter: one}, {Limiter: one}},
		"names must differ":   {{Name: "a", Limiter: one}, {Name: "a", Limiter: one}},
		"nil Limiter":         {{Name: "a"}},
		"no policies":         nil,
	} {
		if _, err := NewHTTPLimits(c, named); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("%v: got %v, want %q", named, err, wantErr)
		}
	}
}

// wantRefused checks a 429 of the limit "api" with every field of the
// middleware's refusal: t and Retry-After both retry seconds.
func wantRefused(t *testing.T, what string, r httpReply, limit uint64, retry string) {
	t.Helper()
	if r.status != 429 {
		t.Fatalf("%s: status %d %s", what, r.status, r.body)
	}
	want(t, what+": policy", r.header.Get("RateLimit-Policy"), fmt.Sprintf(`"api";q=%d;w=3600`, limit))
	want(t, what+": ratelimit", r.header.Get("RateLimit"), `"api";r=0;t=`+retry)
	want(t, what+": retry-after", r.header.Get("Retry-After"), retry)
	want(t, what+": content-type", r.header.Get("Content-Type"), "application/problem+json")
	if !strings.HasSuffix(r.body, `"violated-policies":["api"]}`) {
		t.Fatalf("%s: %s", what, r.body)
	}
}

// Every mode admits the window's limit and refuses the rest with the same
// fields; what differs is what Redis saw.
func TestHTTPEachModeRefusesOverTheLimitWithTheSameFields(t *testing.T) {
	c := client(t)
	const limit = 40
	cfg := ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: limit, Period: time.Hour}
	now := func() uint64 { return httpT0 }
	for _, m := range modes {
		l := mustLimiter(t, c, cfg, Options{Mode: m.mode, SendAt: true, Skew: -1, Prefix: m.name + ":"})
		limits, err := NewHTTPLimits(c, []Named{{Name: "api", Limiter: l}})
		if err != nil {
			t.Fatal(err)
		}
		srv := serveHTTP(t, limits.WithClock(now), ratehttp.Options{Key: ratehttp.Header("X-Api-Key")})
		checks, leases := calls(t, c, "ratecell.check"), calls(t, c, "ratecell.lease")
		admitted, refusedInARow, requests := 0, 0, 0
		// Until ten refusals in a row: a leased node's last grant may
		// still be on its way when the first refusal comes.
		for refusedInARow < 10 {
			if requests >= 2*limit {
				t.Fatalf("%s: no end to admissions", m.name)
			}
			requests++
			r := httpGet(t, srv, "alice")
			if r.status != 200 {
				refusedInARow++
				wantRefused(t, m.name, r, limit, "2798")
				continue
			}
			admitted++
			refusedInARow = 0
			if m.mode != Leased {
				// Redis's own count and reset; a leased admission reports
				// the units this node holds, and no reset.
				want(t, m.name, r.header.Get("RateLimit"), fmt.Sprintf(`"api";r=%d;t=2798`, limit-admitted))
			}
		}
		if m.mode == Leased {
			// Every grant answered: none can add units now.
			deadline := time.Now().Add(10 * time.Second)
			for s := l.Stats().Lease; s.Fetches+s.Refills != s.Replies+s.Failures; s = l.Stats().Lease {
				if time.Now().After(deadline) {
					t.Fatalf("grants unanswered: %+v", s)
				}
				time.Sleep(10 * time.Millisecond)
			}
			for httpGet(t, srv, "alice").status == 200 {
				admitted++
			}
		}
		if admitted != limit {
			t.Fatalf("%s: %d admitted, limit %d", m.name, admitted, limit)
		}
		checks, leases = calls(t, c, "ratecell.check")-checks, calls(t, c, "ratecell.lease")-leases
		switch m.mode {
		case Strict:
			if checks != requests || leases != 0 {
				t.Fatalf("strict: %d checks, %d leases for %d requests", checks, leases, requests)
			}
		case CachedDeny:
			// One command saw the first refusal; the others were remembered.
			if checks != limit+1 || leases != 0 {
				t.Fatalf("cached_deny: %d checks, %d leases", checks, leases)
			}
		case Leased:
			// Grants of at most a tenth of the limit (the default largest),
			// far fewer than the admissions, and no checks.
			if checks != 0 || leases < limit/(limit/10) || leases > limit/2 {
				t.Fatalf("leased: %d checks, %d grants for %d admissions", checks, leases, admitted)
			}
		}
	}
}

// A key refused in CachedDeny costs Redis nothing until its RetryAfter,
// however many requests it sends; then it asks again.
func TestHTTPCachedDenySendsNoCommandWhileADenialIsRemembered(t *testing.T) {
	c := client(t)
	now := new(atomic.Uint64)
	now.Store(httpT0)
	cfg := ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 3, Period: time.Hour}
	l := mustLimiter(t, c, cfg, Options{Mode: CachedDeny, Prefix: "cd:"})
	limits, err := NewHTTPLimits(c, []Named{{Name: "api", Limiter: l}})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveHTTP(t, limits.WithClock(now.Load), ratehttp.Options{Key: ratehttp.Header("X-Api-Key")})
	for i := 0; i < 3; i++ {
		if r := httpGet(t, srv, "bob"); r.status != 200 {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
	}
	wantRefused(t, "the first refusal", httpGet(t, srv, "bob"), 3, "2798")
	before := calls(t, c, "ratecell.check")
	now.Add(uint64(1000 * time.Second))
	for i := 0; i < 50; i++ {
		// The remembered refusal, counted down on the clock.
		wantRefused(t, fmt.Sprintf("remembered %d", i), httpGet(t, srv, "bob"), 3, "1798")
	}
	if n := calls(t, c, "ratecell.check"); n != before {
		t.Fatalf("%d commands while the denial was remembered", n-before)
	}
	// Another key asks Redis; at the window's end "bob" asks again.
	if r := httpGet(t, srv, "carol"); r.status != 200 {
		t.Fatalf("carol: %d", r.status)
	}
	now.Add(uint64(1798 * time.Second))
	r := httpGet(t, srv, "bob")
	if r.status != 200 {
		t.Fatalf("the next window: %d %s", r.status, r.body)
	}
	want(t, "the next window", r.header.Get("RateLimit"), `"api";r=2;t=3600`)
	if n := calls(t, c, "ratecell.check"); n != before+2 {
		t.Fatalf("%d commands after the denial, want 2", n-before)
	}
}

// A CachedDeny or Leased limiter decides one limit on its own: it is
// refused beside another, whose all-or-nothing check it cannot join.
func TestHTTPModesTakeOneLimit(t *testing.T) {
	c := client(t)
	cfg := ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 5, Period: time.Second}
	leased := mustLimiter(t, c, cfg, Options{Mode: Leased})
	_, err := NewHTTPLimits(c, []Named{{Name: "a", Limiter: New(c, cfg)}, {Name: "b", Limiter: leased}})
	if err == nil || !strings.Contains(err.Error(), `limit 1 ("b") has mode leased`) {
		t.Fatalf("got %v", err)
	}
	if _, err := NewHTTPLimits(c, []Named{{Name: "b", Limiter: leased}}); err != nil {
		t.Fatal(err)
	}
}
