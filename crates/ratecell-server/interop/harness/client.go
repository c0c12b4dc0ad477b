package harness

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Client is an RLS v3 gRPC client, the messages Envoy itself sends, from
// go-control-plane.
type Client struct {
	conn *grpc.ClientConn
	rls  rls.RateLimitServiceClient
}

// Dial connects to an RLS v3 server; the connection is closed in cleanup.
func Dial(t testing.TB, addr string) *Client {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &Client{conn: conn, rls: rls.NewRateLimitServiceClient(conn)}
}

// Client dials the server's gRPC port.
func (s *Server) Client(t testing.TB) *Client { return Dial(t, s.GRPCAddr) }

// Call sends one request.
func (c *Client) Call(ctx context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	return c.rls.ShouldRateLimit(ctx, req)
}

// Check sends one request and fails the test on a transport error.
func (c *Client) Check(t testing.TB, req *rls.RateLimitRequest) *rls.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.rls.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v", Show(req), err)
	}
	return resp
}

// Req builds a request; hits 0 leaves hits_addend unset (one hit).
func Req(domain string, hits uint32, ds ...*rlcommon.RateLimitDescriptor) *rls.RateLimitRequest {
	return &rls.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits}
}

// D builds a descriptor from key, value pairs; an odd last key has an
// empty value.
func D(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		e := &rlcommon.RateLimitDescriptor_Entry{Key: kv[i]}
		if i+1 < len(kv) {
			e.Value = kv[i+1]
		}
		d.Entries = append(d.Entries, e)
	}
	return d
}

// DHits is D with the descriptor's own hits_addend.
func DHits(hits uint64, kv ...string) *rlcommon.RateLimitDescriptor {
	d := D(kv...)
	d.HitsAddend = wrapperspb.UInt64(hits)
	return d
}

// Show renders a request compactly for failure messages.
func Show(req *rls.RateLimitRequest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain=%s", req.Domain)
	if req.HitsAddend != 0 {
		fmt.Fprintf(&b, " hits_addend=%d", req.HitsAddend)
	}
	for _, d := range req.Descriptors {
		b.WriteString(" [")
		for i, e := range d.Entries {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "%s=%s", e.Key, e.Value)
		}
		if d.HitsAddend != nil {
			fmt.Fprintf(&b, " hits=%d", d.HitsAddend.GetValue())
		}
		b.WriteString("]")
	}
	return b.String()
}

// Status is one descriptor's answer reduced to what the tests compare.
type Status struct {
	Code      string
	Remaining uint32
	// Limit is "requests/unit" ("" when the answer has no current_limit),
	// with the name in parentheses when there is one.
	Limit string
	// Reset is duration_until_reset in whole seconds, -1 when absent.
	Reset int64
}

func (s Status) String() string {
	return fmt.Sprintf("{%s remaining=%d limit=%q reset=%d}", s.Code, s.Remaining, s.Limit, s.Reset)
}

// Statuses reduces a response's per-descriptor statuses.
func Statuses(resp *rls.RateLimitResponse) []Status {
	out := make([]Status, len(resp.Statuses))
	for i, st := range resp.Statuses {
		s := Status{Code: st.Code.String(), Remaining: st.LimitRemaining, Reset: -1}
		if l := st.CurrentLimit; l != nil {
			s.Limit = fmt.Sprintf("%d/%s", l.RequestsPerUnit, l.Unit.String())
			if l.Name != "" {
				s.Limit += "(" + l.Name + ")"
			}
		}
		if st.DurationUntilReset != nil {
			s.Reset = st.DurationUntilReset.Seconds
		}
		out[i] = s
	}
	return out
}

// DialTLS connects to an RLS v3 server over TLS.
func DialTLS(t testing.TB, addr string, cfg *tls.Config) *Client {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &Client{conn: conn, rls: rls.NewRateLimitServiceClient(conn)}
}

// Conn is the client's gRPC connection (for other services on the port,
// such as grpc.health.v1).
func (c *Client) Conn() *grpc.ClientConn { return c.conn }
