package ratecellredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	ratecell "github.com/ratecell/ratecell-go"
	"github.com/ratecell/ratecell-go/ratehttp"
	"github.com/redis/go-redis/v9"
)

// clientTimeout is the read and write timeout of pausable's client.
const clientTimeout = time.Minute

// pausable starts a redis-server of its own on a free 127.0.0.1 port (the
// module loaded from RATECELL_REDIS_MODULE, which scripts/redis-tests.sh
// sets), to be paused with SIGSTOP. Cleanup continues and kills it,
// whatever the test did.
func pausable(t *testing.T) (*redis.Client, *os.Process) {
	t.Helper()
	module := os.Getenv("RATECELL_REDIS_MODULE")
	if module == "" {
		t.Fatal("set RATECELL_REDIS_MODULE to the built module (scripts/redis-tests.sh does)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command("redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir(), "--loadmodule", module)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// The client's own timeouts are far beyond any the tests set (go-redis
	// ends a read at the sooner of its ReadTimeout and the context's
	// deadline): a call that returns within half of them was ended by
	// the timeout the code under test set, however busy the machine.
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1,
		ReadTimeout: clientTimeout, WriteTimeout: clientTimeout})
	t.Cleanup(func() { _ = c.Close() })
	for i := 0; ; i++ {
		if c.Ping(context.Background()).Err() == nil {
			break
		}
		if i == 100 {
			t.Fatal("redis-server did not start within 5 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c, cmd.Process
}

func TestAPausedStoreIsAnsweredWithinTheTimeout(t *testing.T) {
	c, server := pausable(t)
	limits, err := NewHTTPLimits(c, []Named{{Limiter: New(c, ratecell.Config{Algorithm: ratecell.GCRA, Limit: 100, Period: time.Second})}})
	if err != nil {
		t.Fatal(err)
	}
	// Each request is ended by the timeout its HTTPLimits set or, were
	// that missed, by the client's minute: half of that bounds what the
	// code controls, not the scheduler (and an HTTP client's own timeout
	// longer still, so it is never what ends a request).
	closed := serveHTTP(t, limits, ratehttp.Options{})
	open := serveHTTP(t, limits, ratehttp.Options{FailOpen: true})
	if r := httpGet(t, closed, ""); r.status != 200 || r.header.Get("RateLimit") == "" {
		t.Fatalf("before the pause: %d %v", r.status, r.header)
	}
	if err := server.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		srv    string
		status int
	}{{closed.URL, 503}, {open.URL, 200}} {
		start := time.Now()
		res, err := (&http.Client{Timeout: 2 * clientTimeout}).Get(tc.srv + "/")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		took := time.Since(start)
		if res.StatusCode != tc.status || res.Header.Get("RateLimit") != "" {
			t.Fatalf("paused store: %d %v, want %d without fields", res.StatusCode, res.Header, tc.status)
		}
		if took < DefaultTimeout || took > clientTimeout/2 {
			t.Fatalf("answered in %v: the timeout is %v", took, DefaultTimeout)
		}
	}
	// Another one, per HTTPLimits: limits with the client's minute, and
	// a copy of them with 50 ms, which alone ends the request within
	// half a minute.
	long := limits.WithTimeout(clientTimeout)
	short := serveHTTP(t, long.WithTimeout(50*time.Millisecond), ratehttp.Options{})
	start := time.Now()
	if r := httpGet(t, short, ""); r.status != 503 || time.Since(start) > clientTimeout/2 {
		t.Fatalf("50 ms timeout: %d after %v", r.status, time.Since(start))
	}
	if _, err := limits.WithTimeout(30*time.Millisecond).Check(context.Background(), []byte("k"), 1); !errors.Is(err, ErrTimeout) {
		t.Fatalf("error: %v", err)
	}
	if err := server.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}
