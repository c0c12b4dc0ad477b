package ratecellredis

import (
	"context"
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
