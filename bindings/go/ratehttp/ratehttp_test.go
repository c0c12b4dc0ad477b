package ratehttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratecell "github.com/ratecell/ratecell-go"
	"github.com/ratecell/ratecell-go/ratehttp"
)

// t0 is a whole multiple of 10 s plus 2.5 s: a 10 s fixed window has 7.5 s left.
const t0 = uint64(1_700_000_000)*uint64(time.Second) + 2_500_000_000

// clocked decides on an explicit clock, so every expected field follows
// from SPEC.md's rules. It is also what any Checker (a Redis-backed
// limiter) looks like to the middleware.
type clocked struct {
	l   *ratecell.Limiter
	now *atomic.Uint64
}

func (c clocked) Check(r ratecell.Request) (ratecell.Decision, error) {
	r.At = c.now.Load()
	return c.l.Check(r)
}

func newLimits(t *testing.T, name string, alg ratecell.Algorithm, limit uint64, period time.Duration) (ratehttp.Limits, *ratecell.Limiter, *atomic.Uint64) {
	t.Helper()
	l, err := ratecell.New(ratecell.Config{Algorithm: alg, Limit: limit, Period: period, Capacity: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	now := new(atomic.Uint64)
	now.Store(t0)
	limits, err := ratehttp.Single(name, limit, period, clocked{l, now})
	if err != nil {
		t.Fatal(err)
	}
	return limits, l, now
}

var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello") })

type reply struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, srv *httptest.Server, path string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	client := srv.Client()
	client.Timeout = 20 * time.Second
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{res.StatusCode, res.Header, string(body)}
}

func serve(t *testing.T, limits ratehttp.Limits, opts ratehttp.Options) *httptest.Server {
	srv := httptest.NewServer(ratehttp.Middleware(limits, opts)(hello))
	t.Cleanup(srv.Close)
	return srv
}

func expect(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}
}

func TestSubSecondPeriodsScaleQToTheWindow(t *testing.T) {
	half := []ratehttp.LimitDecision{{Name: "x", Limit: 10, Period: 500 * time.Millisecond}}
	expect(t, "policy", ratehttp.PolicyField(half), `"x";q=20;w=1`)
	for _, c := range []struct {
		limit  uint64
		period time.Duration
		q, w   uint64
	}{{10, 1500 * time.Millisecond, 13, 2}, {10, time.Minute, 10, 60}, {3, 333_333_333, 9, 1}, {1, time.Microsecond, 1_000_000, 1}, {1 << 62, time.Millisecond, ratehttp.SFIntegerMax, 1}} {
		if q, w := ratehttp.QuotaWindow(c.limit, c.period); q != c.q || w != c.w {
			t.Fatalf("%d per %v: q=%d w=%d, want q=%d w=%d", c.limit, c.period, q, w, c.q, c.w)
		}
	}
}

func TestFullTableRefusalCarriesItsWaitNotT0(t *testing.T) {
	// What a keyed table answers a new key it has no room for: no limit
	// refused, the table's wait in RetryAfter, ResetAfter 0.
	items := []ratehttp.LimitDecision{{Name: "k", Limit: 10, Period: time.Second,
		Decision: ratecell.Decision{Allowed: false, RetryAfter: 4 * time.Second}}}
	expect(t, "ratelimit", ratehttp.RateLimitField(items), `"k";r=0;t=4`)
	if s, ok := ratehttp.RetryAfterSeconds(items); !ok || s != 4 {
		t.Fatalf("retry-after: %d %v", s, ok)
	}
}

func TestFieldsForTwoNamedLimits(t *testing.T) {
	items := []ratehttp.LimitDecision{
		{Name: "burst", Limit: 10, Period: 1500 * time.Millisecond,
			Decision: ratecell.Decision{Allowed: false, RetryAfter: 2*time.Second + 1, ResetAfter: 14 * time.Second}},
		{Name: "daily", Limit: 1000, Period: 24 * time.Hour,
			Decision: ratecell.Decision{Allowed: true, Remaining: 950, ResetAfter: time.Hour}},
	}
	expect(t, "policy", ratehttp.PolicyField(items), `"burst";q=13;w=2, "daily";q=1000;w=86400`)
	// t of the refusing limit is its wait (Retry-After), not when it is whole.
	expect(t, "ratelimit", ratehttp.RateLimitField(items), `"burst";r=0;t=3, "daily";r=950;t=3600`)
	if s, ok := ratehttp.RetryAfterSeconds(items); !ok || s != 3 {
		t.Fatalf("retry-after: %d %v", s, ok)
	}
	expect(t, "problem", string(ratehttp.ProblemBody(items)),
		`{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota exceeded","status":429,"violated-policies":["burst"]}`)
	items[1].Decision = ratecell.Decision{Allowed: false, RetryAfter: 5 * time.Second}
	if s, _ := ratehttp.RetryAfterSeconds(items); s != 5 {
		t.Fatalf("longest wait: %d", s)
	}
	items[0].Decision.RetryAfter = ratecell.Never
	if _, ok := ratehttp.RetryAfterSeconds(items); ok {
		t.Fatal("a limit that can never admit gives no Retry-After")
	}
	if !strings.HasSuffix(string(ratehttp.ProblemBody(items)), `"violated-policies":["burst","daily"]}`) {
		t.Fatal(string(ratehttp.ProblemBody(items)))
	}
	expect(t, "escape", ratehttp.PolicyField([]ratehttp.LimitDecision{{Name: `a"b\c`, Limit: 1, Period: time.Second}}), `"a\"b\\c";q=1;w=1`)
	for _, bad := range []string{"caf\u00e9", "tab\there"} {
		if _, err := ratehttp.Single(bad, 1, time.Second, clocked{}); err == nil || !strings.Contains(err.Error(), "policy name") {
			t.Fatalf("name %q: %v", bad, err)
		}
	}
}

func TestFieldsExactAnd429ExactlyWhenTheWindowIsFull(t *testing.T) {
	limits, l, now := newLimits(t, "api", ratecell.FixedWindow, 3, 10*time.Second)
	srv := serve(t, limits, ratehttp.Options{})
	for _, remaining := range []string{"2", "1", "0"} {
		r := get(t, srv, "/")
		if r.status != 200 || r.body != "hello" {
			t.Fatalf("admitted request: %d %q", r.status, r.body)
		}
		expect(t, "policy", r.header.Get("RateLimit-Policy"), `"api";q=3;w=10`)
		expect(t, "ratelimit", r.header.Get("RateLimit"), `"api";r=`+remaining+`;t=8`)
		expect(t, "retry-after", r.header.Get("Retry-After"), "")
	}
	r := get(t, srv, "/")
	if r.status != 429 {
		t.Fatalf("fourth request: %d", r.status)
	}
	expect(t, "retry-after (7.5 s up)", r.header.Get("Retry-After"), "8")
	expect(t, "ratelimit", r.header.Get("RateLimit"), `"api";r=0;t=8`)
	expect(t, "content-type", r.header.Get("Content-Type"), "application/problem+json")
	var problem struct {
		Type     string   `json:"type"`
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(r.body), &problem); err != nil {
		t.Fatal(err, r.body)
	}
	if problem.Type != ratehttp.QuotaExceededType || len(problem.Violated) != 1 || problem.Violated[0] != "api" {
		t.Fatalf("problem: %+v", problem)
	}
	now.Add(7_500_000_000 - 1)
	r = get(t, srv, "/")
	if r.status != 429 || r.header.Get("Retry-After") != "1" {
		t.Fatalf("1 ns before the window ends: %d %q", r.status, r.header.Get("Retry-After"))
	}
	now.Add(1)
	r = get(t, srv, "/")
	if r.status != 200 {
		t.Fatalf("new window: %d", r.status)
	}
	expect(t, "ratelimit", r.header.Get("RateLimit"), `"api";r=2;t=10`)
	st, _ := l.Stats()
	if st.Allowed != 4 || st.Denied != 2 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestARefusalHasTEqualToRetryAfter(t *testing.T) {
	// GCRA, 2 per 10 s: after two requests the next passes in 5 s, while the
	// quota is whole again only in 10 s. t says the first, as Retry-After.
	limits, _, _ := newLimits(t, "", ratecell.GCRA, 2, 10*time.Second)
	srv := serve(t, limits, ratehttp.Options{})
	for i := 0; i < 2; i++ {
		if r := get(t, srv, "/"); r.status != 200 {
			t.Fatalf("request %d: %d", i, r.status)
		}
	}
	r := get(t, srv, "/")
	if r.status != 429 {
		t.Fatalf("third request: %d", r.status)
	}
	expect(t, "retry-after", r.header.Get("Retry-After"), "5")
	expect(t, "ratelimit", r.header.Get("RateLimit"), `"default";r=0;t=5`)
}

func TestAFullKeyTableRefusalCarriesTheSameWaitAsRetryAfter(t *testing.T) {
	// A tiny table that fails closed (overflow deny): some new key finds no
	// place; its refusal carries the table's wait in t and Retry-After.
	l, err := ratecell.New(ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 5, Period: 10 * time.Second,
		Capacity: 1, Overflow: ratecell.OverflowDeny})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	limits, err := ratehttp.FromLimiter(l)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, limits, ratehttp.Options{Key: ratehttp.Header("X-Api-Key")})
	for i := 0; i < 10_000; i++ {
		r := get(t, srv, "/", "X-Api-Key", "k"+strconv.Itoa(i))
		if r.status != 429 {
			continue
		}
		ra := r.header.Get("Retry-After")
		if ra == "" || ra == "0" {
			t.Fatalf("retry-after %q", ra)
		}
		expect(t, "ratelimit", r.header.Get("RateLimit"), `"default";r=0;t=`+ra)
		return
	}
	t.Fatal("the table never ran out of room")
}

func TestDryRunNeverRefuses(t *testing.T) {
	limits, l, _ := newLimits(t, "", ratecell.FixedWindow, 2, 10*time.Second)
	srv := serve(t, limits, ratehttp.Options{DryRun: true})
	for i := 0; i < 6; i++ {
		r := get(t, srv, "/")
		if r.status != 200 || r.header.Get("Retry-After") != "" {
			t.Fatalf("dry run request %d: %d", i, r.status)
		}
		want := `"default";r=0;t=8`
		if i == 0 {
			want = `"default";r=1;t=8`
		}
		expect(t, "ratelimit", r.header.Get("RateLimit"), want)
	}
	st, _ := l.Stats()
	if st.Checks != 6 || st.Allowed != 2 || st.Denied != 4 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestConcurrentClientsOnOneKeyGetExactlyTheLimit(t *testing.T) {
	limits, _, _ := newLimits(t, "", ratecell.SlidingWindow, 25, time.Hour)
	srv := serve(t, limits, ratehttp.Options{Key: ratehttp.Header("X-Api-Key")})
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 80; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
			req.Header.Set("X-Api-Key", "shared")
			client := &http.Client{Timeout: 20 * time.Second}
			res, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			switch res.StatusCode {
			case 200:
				ok.Add(1)
			case 429:
				refused.Add(1)
			default:
				t.Errorf("status %d", res.StatusCode)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 25 || refused.Load() != 55 {
		t.Fatalf("admitted %d, refused %d", ok.Load(), refused.Load())
	}
}

func TestHeaderKeysAndMissingKeyPolicies(t *testing.T) {
	limits, _, _ := newLimits(t, "", ratecell.FixedWindow, 1, 10*time.Second)
	srv := serve(t, limits, ratehttp.Options{Key: ratehttp.Header("X-Api-Key"), MissingKey: ratehttp.MissingKeyShared})
	for _, c := range []struct {
		key    string
		status int
	}{{"a", 200}, {"a", 429}, {"b", 200}, {"", 200}, {"", 429}} {
		var r reply
		if c.key == "" {
			r = get(t, srv, "/")
		} else {
			r = get(t, srv, "/", "X-Api-Key", c.key)
		}
		if r.status != c.status {
			t.Fatalf("key %q: %d, want %d", c.key, r.status, c.status)
		}
	}

	limits, l, _ := newLimits(t, "", ratecell.FixedWindow, 1, 10*time.Second)
	srv = serve(t, limits, ratehttp.Options{Key: ratehttp.Header("X-Api-Key")})
	r := get(t, srv, "/")
	if r.status != 400 || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("reject (the default): %d %q", r.status, r.body)
	}
	srvSkip := serve(t, limits, ratehttp.Options{Key: ratehttp.Header("X-Api-Key"), MissingKey: ratehttp.MissingKeySkip})
	for i := 0; i < 3; i++ {
		if r := get(t, srvSkip, "/"); r.status != 200 || r.header.Get("RateLimit") != "" {
			t.Fatalf("skip: %d %q", r.status, r.header.Get("RateLimit"))
		}
	}
	if st, _ := l.Stats(); st.Checks != 0 {
		t.Fatalf("keyless requests were counted: %+v", st)
	}
}

func TestBehindATrustedProxyTheRightMostUntrustedAddressIsTheKey(t *testing.T) {
	// The server's peer is 127.0.0.1, the "proxy"; 1 request per key.
	limits, _, _ := newLimits(t, "", ratecell.FixedWindow, 1, 10*time.Second)
	srv := serve(t, limits, ratehttp.Options{ClientIP: ratehttp.ClientIPOptions{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")}}})
	for i, c := range []struct {
		xff    string
		status int
	}{
		{"1.2.3.4", 200},
		{"6.6.6.6, 1.2.3.4, 10.0.0.9", 429}, // a spoofed left entry is not another client
		{"5.6.7.8", 200},
		{"2001:db8:0:1::1", 200},
		{"2001:db8:0:1:ffff::2", 429}, // the same /64
		{"2001:db8:0:2::1", 200},
	} {
		if r := get(t, srv, "/", "X-Forwarded-For", c.xff); r.status != c.status {
			t.Fatalf("%d: X-Forwarded-For %q: %d, want %d", i, c.xff, r.status, c.status)
		}
	}
	// Without trusted proxies the header is ignored: both are 127.0.0.1.
	limits, _, _ = newLimits(t, "", ratecell.FixedWindow, 1, 10*time.Second)
	srv = serve(t, limits, ratehttp.Options{})
	if r := get(t, srv, "/", "X-Forwarded-For", "1.2.3.4"); r.status != 200 {
		t.Fatal(r.status)
	}
	if r := get(t, srv, "/", "X-Forwarded-For", "5.6.7.8"); r.status != 429 {
		t.Fatal(r.status)
	}
}

func TestTrustedHopsAndTheForwardedHeader(t *testing.T) {
	limits, _, _ := newLimits(t, "", ratecell.FixedWindow, 1, 10*time.Second)
	srv := serve(t, limits, ratehttp.Options{ClientIP: ratehttp.ClientIPOptions{TrustedHops: 2, Header: "Forwarded"}})
	for i, c := range []struct {
		fwd    string
		status int
	}{
		{"for=6.6.6.6, for=1.2.3.4;proto=http, for=10.0.0.1", 200},
		{`for=7.7.7.7, for="1.2.3.4:5555", for=10.0.0.1`, 429},
		{`for="[2001:db8::1]", for=10.0.0.1`, 200},
		{`for=10.0.0.1`, 200}, // fewer than 2 hops: the peer, 127.0.0.1
		{`for=10.0.0.2`, 429}, // the peer again
	} {
		if r := get(t, srv, "/", "Forwarded", c.fwd); r.status != c.status {
			t.Fatalf("%d: Forwarded %q: %d, want %d", i, c.fwd, r.status, c.status)
		}
	}
}

func TestClientIPOptionsAreChecked(t *testing.T) {
	for _, o := range []ratehttp.ClientIPOptions{{IPv4Prefix: 33}, {IPv6Prefix: 129}, {Header: "X-Real-IP"}, {TrustedHops: -1}, {TrustedProxies: []netip.Prefix{{}}}} {
		if _, err := ratehttp.ClientIP(o); err == nil || !strings.Contains(err.Error(), "ClientIP") {
			t.Fatalf("%+v: %v", o, err)
		}
	}
	key, err := ratehttp.ClientIP(ratehttp.ClientIPOptions{IPv4Prefix: 24, IPv6Prefix: 48})
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]string{
		"192.0.2.7:80": "192.0.2.0/24", "[2001:db8:1:2::1]:80": "2001:db8:1::/48",
		"[::ffff:192.0.2.7]:80": "192.0.2.0/24", "": "", "@": "",
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = addr
		expect(t, addr, string(key(r)), want)
	}
}

func TestNoClientAddressIsA500NotASharedQuota(t *testing.T) {
	limits, l, _ := newLimits(t, "", ratecell.FixedWindow, 1, 10*time.Second)
	h := ratehttp.Middleware(limits, ratehttp.Options{})(hello)
	// A real server on a Unix socket: its requests have no client address.
	sock := filepath.Join(t.TempDir(), "http.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	for i := 0; i < 2; i++ {
		res, err := client.Get("http://unix/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 500 || !strings.Contains(string(body), "no client address") {
			t.Fatalf("request %d: %d %q", i, res.StatusCode, body)
		}
	}
	if st, _ := l.Stats(); st.Checks != 0 {
		t.Fatalf("counted: %+v", st)
	}
}

func TestARefusalHookAnswers429sAndTheFieldsAreKept(t *testing.T) {
	limits, _, _ := newLimits(t, "api", ratecell.FixedWindow, 1, 10*time.Second)
	srv := serve(t, limits, ratehttp.Options{OnRefusal: func(w http.ResponseWriter, r *http.Request, items []ratehttp.LimitDecision) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "slow down on "+r.URL.Path+" ("+items[0].Name+")")
	}})
	if r := get(t, srv, "/"); r.status != 200 {
		t.Fatal(r.status)
	}
	r := get(t, srv, "/")
	if r.status != 503 || r.body != "slow down on / (api)" {
		t.Fatalf("hook: %d %q", r.status, r.body)
	}
	expect(t, "content-type", r.header.Get("Content-Type"), "text/plain")
	expect(t, "retry-after", r.header.Get("Retry-After"), "8")
	expect(t, "ratelimit", r.header.Get("RateLimit"), `"api";r=0;t=8`)
}

func TestADryRunHookSeesEveryViolation(t *testing.T) {
	limits, _, _ := newLimits(t, "", ratecell.FixedWindow, 2, 10*time.Second)
	var mu sync.Mutex
	var seen []string
	srv := serve(t, limits, ratehttp.Options{DryRun: true, OnDryRunRefusal: func(r *http.Request, items []ratehttp.LimitDecision) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.URL.Path+" "+ratehttp.RateLimitField(items))
	}})
	for i := 0; i < 5; i++ {
		if r := get(t, srv, "/"); r.status != 200 {
			t.Fatal(r.status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 || seen[0] != `/ "default";r=0;t=8` {
		t.Fatalf("seen: %q", seen)
	}
}

func TestAMethodFilterLimitsOnlyThoseMethods(t *testing.T) {
	limits, l, _ := newLimits(t, "", ratecell.FixedWindow, 1, 10*time.Second)
	srv := serve(t, limits, ratehttp.Options{Methods: []string{http.MethodPost}})
	for i := 0; i < 3; i++ {
		if r := get(t, srv, "/"); r.status != 200 || r.header.Get("RateLimit") != "" {
			t.Fatalf("GET: %d %q", r.status, r.header.Get("RateLimit"))
		}
	}
	if st, _ := l.Stats(); st.Checks != 0 {
		t.Fatalf("GETs were counted: %+v", st)
	}
	for i, want := range []int{200, 429} {
		res, err := srv.Client().Post(srv.URL+"/", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Fatalf("POST %d: %d, want %d", i, res.StatusCode, want)
		}
	}
}

func TestExemptionsAreNeverCounted(t *testing.T) {
	limits, l, _ := newLimits(t, "", ratecell.FixedWindow, 1, 10*time.Second)
	srv := serve(t, limits, ratehttp.Options{
		ExemptPaths: []string{"/health"},
		Exempt:      func(r *http.Request) bool { return r.Header.Get("X-Internal") != "" },
	})
	for i := 0; i < 5; i++ {
		if r := get(t, srv, "/health"); r.status != 200 || r.header.Get("RateLimit") != "" {
			t.Fatalf("exempt path: %d", r.status)
		}
		if r := get(t, srv, "/", "X-Internal", "1"); r.status != 200 {
			t.Fatalf("exempt predicate: %d", r.status)
		}
	}
	if st, _ := l.Stats(); st.Checks != 0 {
		t.Fatalf("exempt requests were counted: %+v", st)
	}
	if r := get(t, srv, "/"); r.status != 200 {
		t.Fatal(r.status)
	}
	if r := get(t, srv, "/"); r.status != 429 {
		t.Fatal(r.status)
	}
}

func TestCostAndClientAddressKey(t *testing.T) {
	limits, _, _ := newLimits(t, "", ratecell.FixedWindow, 10, 10*time.Second)
	srv := serve(t, limits, ratehttp.Options{Cost: func(*http.Request) uint64 { return 4 }})
	expect(t, "first", get(t, srv, "/").header.Get("RateLimit"), `"default";r=6;t=8`)
	expect(t, "second", get(t, srv, "/").header.Get("RateLimit"), `"default";r=2;t=8`)
	if r := get(t, srv, "/"); r.status != 429 {
		t.Fatal(r.status)
	}
}

type broken struct{}

func (broken) Check(context.Context, []byte, uint64) ([]ratehttp.LimitDecision, error) {
	return nil, errors.New("store down")
}

func TestAFailingLimiterFailsClosedUnlessTold(t *testing.T) {
	r := get(t, serve(t, broken{}, ratehttp.Options{}), "/")
	if r.status != 503 || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("fail closed: %d %q", r.status, r.body)
	}
	r = get(t, serve(t, broken{}, ratehttp.Options{FailOpen: true}), "/")
	if r.status != 200 || r.header.Get("RateLimit") != "" {
		t.Fatalf("fail open: %d %q", r.status, r.header.Get("RateLimit"))
	}
}

// A store that fails is never silent: the hook sees each failure with its
// request, its error and the answer given; the log says so once per
// middleware, not once per request.
func TestStoreFailuresReachTheHookAndTheLog(t *testing.T) {
	var buf strings.Builder
	var mu sync.Mutex
	log.SetOutput(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}))
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	type seen struct {
		query      string
		err        string
		failedOpen bool
	}
	var got []seen
	hook := func(r *http.Request, err error, failedOpen bool) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, seen{r.URL.RawQuery, err.Error(), failedOpen})
	}
	closed := serve(t, broken{}, ratehttp.Options{OnStoreError: hook})
	open := serve(t, broken{}, ratehttp.Options{OnStoreError: hook, FailOpen: true})
	empty := serve(t, emptyLimits{}, ratehttp.Options{OnStoreError: hook})
	for i := 0; i < 3; i++ {
		if r := get(t, closed, "/?closed"); r.status != 503 {
			t.Fatalf("fail closed: %d", r.status)
		}
	}
	for i := 0; i < 2; i++ {
		if r := get(t, open, "/?open"); r.status != 200 {
			t.Fatalf("fail open: %d", r.status)
		}
	}
	if r := get(t, empty, "/?empty"); r.status != 503 {
		t.Fatalf("no decisions: %d", r.status)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []seen{
		{"closed", "store down", false}, {"closed", "store down", false}, {"closed", "store down", false},
		{"open", "store down", true}, {"open", "store down", true},
		{"empty", ratehttp.ErrNoDecisions.Error(), false},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("hook saw %v, want %v", got, want)
	}
	// One line per middleware: its first failure (the next ones fall in
	// the same StoreErrorLogInterval, which a few loopback requests cannot
	// span).
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d log lines, want 3:\n%s", len(lines), buf.String())
	}
	for i, want := range []string{"store down); requests get 503", "store down); requests pass unlimited", "no decisions); requests get 503"} {
		if !strings.Contains(lines[i], want) {
			t.Fatalf("log line %d %q lacks %q", i, lines[i], want)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

type emptyLimits struct{}

func (emptyLimits) Check(context.Context, []byte, uint64) ([]ratehttp.LimitDecision, error) {
	return nil, nil
}

// Issue 33 §4 through the middleware keyed by an API-key header: a flood
// of made-up keys fills the table with live states. Under OverflowDeny the
// next new client is refused; under OverflowEvict, the policy the package
// documentation builds its limiters with, it is admitted.
func TestAFloodOfMadeUpKeysLocksOutNewClientsOnlyUnderDeny(t *testing.T) {
	for _, policy := range []ratecell.Overflow{ratecell.OverflowDeny, ratecell.OverflowEvict} {
		l, err := ratecell.New(ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 1, Period: time.Hour, Capacity: 16, Overflow: policy})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		now := new(atomic.Uint64)
		now.Store(t0)
		limits, err := ratehttp.Single("default", 1, time.Hour, clocked{l, now})
		if err != nil {
			t.Fatal(err)
		}
		h := ratehttp.Middleware(limits, ratehttp.Options{Key: ratehttp.Header("X-Api-Key")})(hello)
		status := func(key string) int {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.Header.Set("X-Api-Key", key)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			return rec.Code
		}
		for i := 0; i < 1000; i++ {
			status("flood-" + strconv.Itoa(i))
		}
		got := status("a-new-legitimate-client")
		want := http.StatusOK
		if policy == ratecell.OverflowDeny {
			want = http.StatusTooManyRequests
		}
		if got != want {
			t.Fatalf("%v: a new client after the flood got %d, want %d", policy, got, want)
		}
	}
}

// A plan from a header picks each request's quota; an unknown plan is the
// default tier's; a key that changes tier keeps what it spent.
func TestATierIsChosenPerRequest(t *testing.T) {
	free := ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 2, Period: time.Hour, Capacity: 64, Overflow: ratecell.OverflowEvict}
	pro := free
	pro.Limit = 5
	l, err := ratecell.NewWith(ratecell.Options{Tiers: [][]ratecell.Config{{free}, {pro}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	limits, err := ratehttp.Tiered([]ratehttp.Policy{{Name: "free", Limit: 2, Period: time.Hour}, {Name: "pro", Limit: 5, Period: time.Hour}}, l)
	if err != nil {
		t.Fatal(err)
	}
	plans := map[string]int{"free": 0, "pro": 1}
	plan := func(r *http.Request) int {
		if p, ok := plans[r.Header.Get("X-Plan")]; ok {
			return p
		}
		return 99 // a plan the limits lack: the default tier
	}
	srv := serve(t, limits, ratehttp.Options{Key: ratehttp.Header("X-Api-Key"), Tier: plan})
	ask := func(key, plan string) reply {
		return get(t, srv, "/", "X-Api-Key", key, "X-Plan", plan)
	}
	for _, r := range []int{1, 0} {
		got := ask("a", "free")
		expect(t, "status", strconv.Itoa(got.status), "200")
		expect(t, "policy", got.header.Get("RateLimit-Policy"), `"free";q=2;w=3600`)
		if want := `"free";r=` + strconv.Itoa(r) + ";"; !strings.HasPrefix(got.header.Get("RateLimit"), want) {
			t.Fatalf("RateLimit %q, want %q...", got.header.Get("RateLimit"), want)
		}
	}
	expect(t, "a's third", strconv.Itoa(ask("a", "free").status), "429")
	for _, r := range []int{4, 3, 2, 1, 0} {
		got := ask("b", "pro")
		expect(t, "policy", got.header.Get("RateLimit-Policy"), `"pro";q=5;w=3600`)
		if want := `"pro";r=` + strconv.Itoa(r) + ";"; got.status != 200 || !strings.HasPrefix(got.header.Get("RateLimit"), want) {
			t.Fatalf("%d %q, want 200 %q...", got.status, got.header.Get("RateLimit"), want)
		}
	}
	expect(t, "b's sixth", strconv.Itoa(ask("b", "pro").status), "429")
	got := ask("c", "enterprise")
	if got.status != 200 || !strings.HasPrefix(got.header.Get("RateLimit"), `"free";r=1;`) {
		t.Fatalf("unknown plan: %d %q", got.status, got.header.Get("RateLimit"))
	}
	// Upgraded: the two units spent under free count under pro.
	got = ask("a", "pro")
	if got.status != 200 || !strings.HasPrefix(got.header.Get("RateLimit"), `"pro";r=2;`) {
		t.Fatalf("upgraded: %d %q", got.status, got.header.Get("RateLimit"))
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Options.Tier over limits without tiers did not panic")
		}
	}()
	ratehttp.Middleware(broken{}, ratehttp.Options{Tier: plan})
}

// Options.Disabled: every request passes, unchecked and unfielded.
func TestADisabledMiddlewarePassesEveryRequestUnchecked(t *testing.T) {
	limits, l, _ := newLimits(t, "api", ratecell.FixedWindow, 1, 10*time.Second)
	srv := serve(t, limits, ratehttp.Options{Disabled: true})
	for i := 0; i < 5; i++ {
		if r := get(t, srv, "/"); r.status != 200 || r.header.Get("RateLimit") != "" {
			t.Fatalf("request %d: %d %q", i, r.status, r.header.Get("RateLimit"))
		}
	}
	if s, _ := l.Stats(); s.Checks != 0 {
		t.Fatalf("%d checks through a disabled middleware", s.Checks)
	}
	on := serve(t, limits, ratehttp.Options{})
	if a, b := get(t, on, "/").status, get(t, on, "/").status; a != 200 || b != 429 {
		t.Fatalf("enabled: %d %d", a, b)
	}
}

// Options.LegacyHeaders: X-RateLimit-* for the limit with the fewest units
// left, or the refusing one; Reset is UNIX seconds, t from the server's now.
func TestLegacyHeadersBesideTheDraftsFields(t *testing.T) {
	limits, _, _ := newLimits(t, "api", ratecell.FixedWindow, 3, 10*time.Second)
	srv := serve(t, limits, ratehttp.Options{LegacyHeaders: true})
	for _, remaining := range []string{"2", "1", "0"} {
		before := time.Now().Unix()
		r := get(t, srv, "/")
		after := time.Now().Unix()
		expect(t, "status", strconv.Itoa(r.status), "200")
		expect(t, "limit", r.header.Get("X-RateLimit-Limit"), "3")
		expect(t, "remaining", r.header.Get("X-RateLimit-Remaining"), remaining)
		reset, err := strconv.ParseInt(r.header.Get("X-RateLimit-Reset"), 10, 64)
		// t is 8: t0's window has 7.5 s left.
		if err != nil || reset < before+8 || reset > after+8 {
			t.Fatalf("reset %q, want within [%d, %d]", r.header.Get("X-RateLimit-Reset"), before+8, after+8)
		}
	}
	r := get(t, srv, "/")
	expect(t, "status", strconv.Itoa(r.status), "429")
	expect(t, "refused remaining", r.header.Get("X-RateLimit-Remaining"), "0")
	expect(t, "retry-after", r.header.Get("Retry-After"), "8")
	plain, _, _ := newLimits(t, "api", ratecell.FixedWindow, 3, 10*time.Second)
	if h := get(t, serve(t, plain, ratehttp.Options{}), "/").header.Get("X-RateLimit-Limit"); h != "" {
		t.Fatalf("legacy headers sent by default: %q", h)
	}
	items := []ratehttp.LimitDecision{
		{Name: "a", Limit: 10, Period: time.Second, Decision: ratecell.Decision{Allowed: true, Remaining: 5, ResetAfter: time.Second}},
		{Name: "b", Limit: 100, Period: time.Hour, Decision: ratecell.Decision{Allowed: true, Remaining: 4, ResetAfter: time.Minute}},
	}
	if l, rem, reset, ok := ratehttp.LegacyValues(items, time.Unix(1000, 0)); !ok || l != 100 || rem != 4 || reset != 1060 {
		t.Fatalf("fewest left: %d %d %d %v", l, rem, reset, ok)
	}
}

// KeyParts: the client's address and the path, each route its own quota
// per client; a part with no value is a missing key.
func TestAKeyOfTheAddressAndThePath(t *testing.T) {
	addr, err := ratehttp.ClientIP(ratehttp.ClientIPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	limits, _, _ := newLimits(t, "api", ratecell.FixedWindow, 1, 10*time.Second)
	srv := serve(t, limits, ratehttp.Options{Key: ratehttp.KeyParts(addr, ratehttp.PathKey)})
	for _, path := range []string{"/a", "/b"} {
		if a, b := get(t, srv, path).status, get(t, srv, path).status; a != 200 || b != 429 {
			t.Fatalf("%s: %d %d", path, a, b)
		}
	}
	keyed, _, _ := newLimits(t, "api", ratecell.FixedWindow, 1, 10*time.Second)
	srv = serve(t, keyed, ratehttp.Options{Key: ratehttp.KeyParts(ratehttp.Header("X-Api-Key"), ratehttp.MethodKey)})
	expect(t, "no key", strconv.Itoa(get(t, srv, "/").status), "400")
	expect(t, "a", strconv.Itoa(get(t, srv, "/", "X-Api-Key", "a").status), "200")
	expect(t, "a again", strconv.Itoa(get(t, srv, "/", "X-Api-Key", "a").status), "429")
	// Length prefixes: ("ab", "c") and ("a", "bc") are different keys.
	part := func(v string) func(*http.Request) []byte { return func(*http.Request) []byte { return []byte(v) } }
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if string(ratehttp.KeyParts(part("ab"), part("c"))(r)) == string(ratehttp.KeyParts(part("a"), part("bc"))(r)) {
		t.Fatal("two part lists gave one key")
	}
}

// Default limits for every route (the middleware around the mux, per
// client), an application-wide limit (one key for every client), a
// route's own limit and an exempt path, composed from the one middleware.
func TestDefaultApplicationWideAndRouteLimitsCompose(t *testing.T) {
	login, _, _ := newLimits(t, "login", ratecell.FixedWindow, 1, 10*time.Second)
	perClient, _, _ := newLimits(t, "client", ratecell.FixedWindow, 3, 10*time.Second)
	app, _, _ := newLimits(t, "app", ratecell.FixedWindow, 4, 10*time.Second)
	mux := http.NewServeMux()
	mux.Handle("/", hello)
	mux.Handle("/login", ratehttp.Middleware(login, ratehttp.Options{})(hello))
	mux.Handle("/health", hello)
	exempt := []string{"/health"}
	global := func(*http.Request) []byte { return []byte("app") }
	handler := ratehttp.Middleware(app, ratehttp.Options{Key: global, ExemptPaths: exempt})(
		ratehttp.Middleware(perClient, ratehttp.Options{ExemptPaths: exempt})(mux))
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	r := get(t, srv, "/login")
	if got := r.header.Values("RateLimit"); r.status != 200 || !slices.Equal(got, []string{`"app";r=3;t=8`, `"client";r=2;t=8`, `"login";r=0;t=8`}) {
		t.Fatalf("%d %q", r.status, got)
	}
	if r = get(t, srv, "/login"); r.status != 429 || !strings.Contains(r.body, `["login"]`) {
		t.Fatalf("route's own: %d %s", r.status, r.body)
	}
	if r = get(t, srv, "/"); r.status != 200 {
		t.Fatalf("default: %d", r.status)
	}
	if r = get(t, srv, "/"); r.status != 429 || !strings.Contains(r.body, `["client"]`) {
		t.Fatalf("default refuses: %d %s", r.status, r.body)
	}
	if r = get(t, srv, "/"); r.status != 429 || !strings.Contains(r.body, `["app"]`) {
		t.Fatalf("application-wide refuses: %d %s", r.status, r.body)
	}
	for i := 0; i < 5; i++ {
		if r = get(t, srv, "/health"); r.status != 200 || r.header.Get("RateLimit") != "" {
			t.Fatalf("exempt: %d %q", r.status, r.header.Get("RateLimit"))
		}
	}
}
