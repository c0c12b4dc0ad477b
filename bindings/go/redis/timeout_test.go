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
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1})
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
		res, err := (&http.Client{Timeout: 5 * time.Second}).Get(tc.srv + "/")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		took := time.Since(start)
		if res.StatusCode != tc.status || res.Header.Get("RateLimit") != "" {
			t.Fatalf("paused store: %d %v, want %d without fields", res.StatusCode, res.Header, tc.status)
		}
		if took < DefaultTimeout || took > 2*time.Second {
			t.Fatalf("answered in %v: the timeout is %v", took, DefaultTimeout)
		}
	}
	// A shorter one, per HTTPLimits.
	short := serveHTTP(t, limits.WithTimeout(50*time.Millisecond), ratehttp.Options{})
	start := time.Now()
	if r := httpGet(t, short, ""); r.status != 503 || time.Since(start) > DefaultTimeout {
		t.Fatalf("50 ms timeout: %d after %v", r.status, time.Since(start))
	}
	if _, err := limits.WithTimeout(30*time.Millisecond).Check(context.Background(), []byte("k"), 1); !errors.Is(err, ErrTimeout) {
		t.Fatalf("error: %v", err)
	}
	if err := server.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}
