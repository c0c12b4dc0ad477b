package interop

import (
	"net/http"
	"strconv"
	"testing"

	h "github.com/ratecell/ratecell-server/interop/harness"
)

// fa1: 127.0.0.1 is not a trusted proxy, so X-Forwarded-For is ignored and
// every request counts on the peer's address; the default deny status.
const fa1YAML = `domain: fa1
forward_auth:
  descriptors:
    - [{key: client, from: client_address}]
  trusted_proxies: ["10.0.0.0/8"]
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 2}
`

// fa2: method and path from the proxies' headers (Traefik's X-Forwarded-*,
// nginx's X-Original-*) or the request's own, and a constant descriptor.
const fa2YAML = `domain: fa2
forward_auth:
  descriptors:
    - [{key: m, from: method}, {key: p, from: path}]
    - [{key: tenant, value: acme}]
  trusted_proxies: ["127.0.0.1/32"]
  deny_status: 429
descriptors:
  - key: m
    value: POST
    descriptors:
      - key: p
        value: /upload
        rate_limit: {unit: hour, requests_per_unit: 1}
  - key: tenant
    value: acme
    rate_limit: {unit: hour, requests_per_unit: 3}
`

// TestForwardAuth calls /forward-auth/<domain> directly, as Traefik's
// ForwardAuth and Caddy's forward_auth do.
func TestForwardAuth(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := h.Start(t, h.Options{Kind: k, Configs: map[string]string{"fa1.yaml": fa1YAML, "fa2.yaml": fa2YAML}})
		hourly(t)
		type call struct {
			method, domain string
			header         http.Header
			want           int
		}
		calls := []call{
			// fa1: three forwarded addresses, one counter (the peer's).
			{"GET", "fa1", http.Header{"X-Forwarded-For": {"203.0.113.1"}}, 200},
			{"GET", "fa1", http.Header{"X-Forwarded-For": {"203.0.113.2"}}, 200},
			{"GET", "fa1", http.Header{"X-Forwarded-For": {"203.0.113.3"}}, 429},
			// fa2: POST /upload (Traefik's headers) admits once; the second
			// is denied and, all or nothing, takes nothing from tenant=acme.
			{"GET", "fa2", http.Header{"X-Forwarded-Method": {"POST"}, "X-Forwarded-Uri": {"/upload"}}, 200},
			{"GET", "fa2", http.Header{"X-Forwarded-Method": {"POST"}, "X-Forwarded-Uri": {"/upload"}}, 429},
			// nginx's headers: POST /upload again, denied.
			{"GET", "fa2", http.Header{"X-Original-Method": {"POST"}, "X-Original-Uri": {"/upload"}}, 429},
			// GET /x: no limit on m/p; tenant=acme has 2 left.
			{"GET", "fa2", http.Header{"X-Original-Method": {"GET"}, "X-Original-Uri": {"/x"}}, 200},
			// No forwarded headers: the auth request's own POST and path,
			// which no m/p limit matches.
			{"POST", "fa2", nil, 200},
			{"GET", "fa2", nil, 429},
		}
		for i, c := range calls {
			req, err := http.NewRequest(c.method, s.HTTP+"/forward-auth/"+c.domain, nil)
			if err != nil {
				t.Fatal(err)
			}
			for name, vs := range c.header {
				req.Header[http.CanonicalHeaderKey(name)] = vs
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Errorf("call %d: %s /forward-auth/%s %v: status %d, want %d", i+1, c.method, c.domain, c.header, resp.StatusCode, c.want)
			}
			if resp.Header.Get("RateLimit") == "" || resp.Header.Get("RateLimit-Policy") == "" {
				t.Errorf("call %d: RateLimit %q, RateLimit-Policy %q: want both", i+1, resp.Header.Get("RateLimit"), resp.Header.Get("RateLimit-Policy"))
			}
			if c.want != 200 {
				if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 3600 {
					t.Errorf("call %d: Retry-After %q, want seconds in [1, 3600]", i+1, resp.Header.Get("Retry-After"))
				}
			}
		}
	}, h.Memory, h.Strict)
}
