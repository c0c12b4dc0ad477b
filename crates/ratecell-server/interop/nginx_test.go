package interop

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	h "github.com/ratecell/ratecell-server/interop/harness"
)

// The forward-auth domains: "edge" limits per user (a header), "edgeip"
// per client address (X-Forwarded-For, nginx being a trusted proxy) and
// path (X-Original-URI). nginx's auth_request takes only 2xx, 401 and 403
// from the auth server, so the denial is 403, turned back into 429 by
// error_page.
const edgeYAML = `domain: edge
forward_auth:
  descriptors:
    - [{key: user, from: "header:X-User"}]
  trusted_proxies: ["127.0.0.1/32"]
  deny_status: 403
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: user
    value: flow
    rate_limit: {unit: hour, requests_per_unit: 200}
`

const edgeIPYAML = `domain: edgeip
forward_auth:
  descriptors:
    - [{key: client, from: client_address}, {key: path, from: path}]
  trusted_proxies: ["127.0.0.1/32"]
  deny_status: 403
descriptors:
  - key: client
    descriptors:
      - key: path
        value: /ip/limited
        rate_limit: {unit: hour, requests_per_unit: 3}
`

const otherYAML = `domain: other
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: %d}
`

// nginxConf is the http{} body: each location asks the forward-auth
// endpoint of its domain, passes the answer's RateLimit fields on, and
// turns the 403 into 429 with Retry-After.
func nginxConf(port int, authBase, backend string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "    server {\n        listen 127.0.0.1:%d;\n", port)
	b.WriteString("        location = /_nginx_health { return 200 \"ok\\n\"; }\n")
	for _, loc := range []struct{ prefix, domain string }{{"/u/", "edge"}, {"/ip/", "edgeip"}} {
		fmt.Fprintf(&b, `        location %[1]s {
            auth_request /_auth_%[2]s;
            auth_request_set $rl $upstream_http_ratelimit;
            auth_request_set $rl_policy $upstream_http_ratelimit_policy;
            auth_request_set $rl_retry_after $upstream_http_retry_after;
            add_header RateLimit $rl always;
            add_header RateLimit-Policy $rl_policy always;
            error_page 403 = @limited;
            proxy_pass %[3]s;
        }
        location = /_auth_%[2]s {
            internal;
            proxy_pass %[4]s/forward-auth/%[2]s;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header X-Original-URI $request_uri;
            proxy_set_header X-Original-Method $request_method;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        }
`, loc.prefix, loc.domain, backend, authBase)
	}
	b.WriteString(`        location @limited {
            add_header Retry-After $rl_retry_after always;
            add_header RateLimit $rl always;
            add_header RateLimit-Policy $rl_policy always;
            return 429 "rate limited\n";
        }
    }
`)
	return b.String()
}

// edge is nginx in front of a counting backend, asking a forward-auth
// server.
type edge struct {
	nginx   *h.Nginx
	backend *atomic.Int64
	server  *h.Server
}

func startEdge(t *testing.T, k h.Kind) *edge {
	var hits atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "hello "+r.URL.Path+"\n")
	}))
	t.Cleanup(backend.Close)
	s := h.Start(t, h.Options{Kind: k, Configs: map[string]string{
		"edge.yaml": edgeYAML, "edgeip.yaml": edgeIPYAML, "other.yaml": fmt.Sprintf(otherYAML, 1),
	}})
	n := h.StartNginx(t, func(port int) string { return nginxConf(port, s.HTTP, backend.URL) })
	return &edge{nginx: n, backend: &hits, server: s}
}

type answer struct {
	status                      int
	body                        string
	rateLimit, policy, retryAft string
}

func (e *edge) get(t *testing.T, path string, header map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest("GET", e.nginx.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s through nginx: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(body), resp.Header.Get("RateLimit"), resp.Header.Get("RateLimit-Policy"), resp.Header.Get("Retry-After")}
}

var (
	fieldR = regexp.MustCompile(`;r=(\d+)`)
	fieldT = regexp.MustCompile(`;t=(\d+)`)
	fieldQ = regexp.MustCompile(`;q=(\d+)`)
	fieldW = regexp.MustCompile(`;w=(\d+)`)
)

func field(re *regexp.Regexp, s string) int {
	m := re.FindStringSubmatch(s)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestNginxAuthRequest: exact counts through nginx, and the RateLimit,
// RateLimit-Policy and Retry-After fields reaching the client.
func TestNginxAuthRequest(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		e := startEdge(t, k)
		hourly(t)
		for i := range 7 {
			a := e.get(t, "/u/page", map[string]string{"X-User": "alice"})
			want := http.StatusOK
			if i >= 5 {
				want = http.StatusTooManyRequests
			}
			if a.status != want {
				t.Errorf("alice request %d: status %d, want %d (body %q)", i+1, a.status, want, a.body)
			}
			if q, w := field(fieldQ, a.policy), field(fieldW, a.policy); q != 5 || w != 3600 {
				t.Errorf("alice request %d: RateLimit-Policy %q, want q=5 and w=3600", i+1, a.policy)
			}
			wantR := max(0, 4-i)
			if r := field(fieldR, a.rateLimit); r != wantR {
				t.Errorf("alice request %d: RateLimit %q, want r=%d", i+1, a.rateLimit, wantR)
			}
			if tt := field(fieldT, a.rateLimit); tt < 0 || tt > 3600 {
				t.Errorf("alice request %d: RateLimit %q, want t= in [0, 3600]", i+1, a.rateLimit)
			}
			if want == http.StatusTooManyRequests {
				if ra, err := strconv.Atoi(a.retryAft); err != nil || ra < 1 || ra > 3600 {
					t.Errorf("alice request %d: Retry-After %q, want seconds in [1, 3600]", i+1, a.retryAft)
				}
			} else if !strings.HasPrefix(a.body, "hello /u/page") {
				t.Errorf("alice request %d: body %q, not the backend's", i+1, a.body)
			}
		}
		if a := e.get(t, "/u/page", map[string]string{"X-User": "bob"}); a.status != http.StatusOK {
			t.Errorf("bob: status %d, want 200 (a user of his own)", a.status)
		}
		if got := e.backend.Load(); got != 6 {
			t.Errorf("the backend saw %d requests, want 6 (alice's 5 and bob's 1)", got)
		}

		// Per client address, read from X-Forwarded-For since nginx is a
		// trusted proxy, and per path, from X-Original-URI.
		for i := range 4 {
			want := http.StatusOK
			if i == 3 {
				want = http.StatusTooManyRequests
			}
			if a := e.get(t, "/ip/limited", map[string]string{"X-Forwarded-For": "203.0.113.7"}); a.status != want {
				t.Errorf("203.0.113.7 /ip/limited request %d: status %d, want %d", i+1, a.status, want)
			}
		}
		if a := e.get(t, "/ip/limited", map[string]string{"X-Forwarded-For": "203.0.113.8"}); a.status != http.StatusOK {
			t.Errorf("203.0.113.8 /ip/limited: status %d, want 200 (another client)", a.status)
		}
		if a := e.get(t, "/ip/other", map[string]string{"X-Forwarded-For": "203.0.113.7"}); a.status != http.StatusOK {
			t.Errorf("203.0.113.7 /ip/other: status %d, want 200 (a path without a limit)", a.status)
		}
	}, h.Memory, h.Strict)
}

// TestNginxReloadLosesNoCount: 300 requests of one user (limit 200) from
// four clients while nginx reloads and ratecell-server reloads an unrelated
// domain's file: exactly 200 reach the backend, exactly 100 get 429, and
// nothing else is answered.
func TestNginxReloadLosesNoCount(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		e := startEdge(t, k)
		c := e.server.Client(t)
		hourly(t)
		const total, limit = 300, 200
		var issued atomic.Int64
		reloaded := make(chan struct{})
		statuses := make(chan int, total)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					n := issued.Add(1)
					if n > total {
						return
					}
					if n >= 2*total/3 {
						// The last third waits for both reloads to be done.
						<-reloaded
					}
					req, _ := http.NewRequest("GET", e.nginx.URL+"/u/flow", nil)
					req.Header.Set("X-User", "flow")
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						statuses <- -1
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					statuses <- resp.StatusCode
				}
			}()
		}
		h.Poll(t, 60*time.Second, "a third of the requests issued", func() error {
			if issued.Load() < total/3 {
				return fmt.Errorf("%d issued", issued.Load())
			}
			return nil
		})
		if err := e.nginx.Reload(); err != nil {
			close(reloaded)
			t.Fatal(err)
		}
		e.server.WriteConfig(t, "other.yaml", fmt.Sprintf(otherYAML, 2))
		h.Poll(t, 60*time.Second, "nginx's reload", func() error {
			if !strings.Contains(e.nginx.ErrorLog(), "reconfiguring") {
				return fmt.Errorf("no 'reconfiguring' in nginx's error log")
			}
			return nil
		})
		n := 0
		h.Poll(t, 60*time.Second, "ratecell-server's reload of other.yaml", func() error {
			n++
			got := h.Statuses(c.Check(t, h.Req("other", 0, h.D("k", fmt.Sprint(n)))))[0].Limit
			if got != "2/HOUR" {
				return fmt.Errorf("domain other's limit %q", got)
			}
			return nil
		})
		close(reloaded)
		wg.Wait()
		close(statuses)
		counts := map[int]int{}
		for s := range statuses {
			counts[s]++
		}
		if counts[200] != limit || counts[429] != total-limit || len(counts) != 2 {
			t.Errorf("statuses %v, want exactly 200:%d and 429:%d", counts, limit, total-limit)
		}
		if got := e.backend.Load(); got != limit {
			t.Errorf("the backend saw %d requests, want %d", got, limit)
		}
	}, h.Memory, h.Strict)
}
