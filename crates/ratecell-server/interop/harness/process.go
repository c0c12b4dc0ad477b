// Package harness starts the processes the interop tests talk to — the rate
// limit service under test (envoyproxy/ratelimit's service_cmd, "the
// incumbent", or ratecell-server), redis-server and nginx — on free
// 127.0.0.1 ports, waits for them with bounded polls, and stops them in the
// test's cleanup whatever the outcome. It owns no assertion about the
// servers' answers; the tests in the parent package do.
package harness

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds every wait for a process this package started to
// become ready: the limit is on our own polling, so a busy machine only
// makes the wait longer, never a test fail, unless the process is stuck.
const startTimeout = 60 * time.Second

// stopTimeout is how long a process gets after SIGTERM before SIGKILL.
const stopTimeout = 10 * time.Second

var (
	portsMu sync.Mutex
	// handedOut holds every port FreePort returned in this test process, so
	// that two servers started at once never get the same one (the
	// incumbent listens with SO_REUSEPORT, so a clash would not even fail).
	handedOut = map[int]bool{}
)

// FreePort returns a TCP port on 127.0.0.1 that nothing listened on when it
// was probed and that this process has not handed out before.
func FreePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("no free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut[port] {
			handedOut[port] = true
			return port
		}
	}
	t.Fatal("no free port in 100 attempts")
	return 0
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// process is a child process whose output goes to a log file, killed in
// the test's cleanup.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
}

func startProcess(t testing.TB, name, bin string, args, env []string, logPath string) *process {
	t.Helper()
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("starting %s (%s): %v", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s log (%s):\n%s", name, logPath, p.logTail())
		}
	})
	return p
}

// exited returns an error if the process has ended.
func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v", p.name, p.waitErr)
	default:
		return nil
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after stopTimeout.
func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// signal sends sig to the process itself.
func (p *process) signal(sig syscall.Signal) error {
	return p.cmd.Process.Signal(sig)
}

// logTail is the end of the process's log, for failure messages.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	const max = 8000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// Log is the whole log so far.
func (p *process) Log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// errStop ends a poll at once: the condition can no longer become true.
type errStop struct{ err error }

func (e errStop) Error() string { return e.err.Error() }

// pollUntil calls cond every 20 ms until it returns nil, returns an errStop,
// or timeout passes; it returns the last error.
func pollUntil(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		var stop errStop
		if errors.As(err, &stop) {
			return stop.err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Poll calls cond every 20 ms until it returns nil or timeout passes, and
// fails the test with the last error then. The timeout bounds our polling:
// use it for conditions that become true once the server has done its part
// (a reload, a metrics flush), never to assert how fast that was.
func Poll(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := pollUntil(timeout, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// FreshWindow waits, when less than need is left of the current window of
// length unit (aligned on the Unix epoch, as both servers align fixed
// windows), until just after the next one starts, so that a test making a
// known number of hits sees them all in one window.
func FreshWindow(t testing.TB, unit, need time.Duration) {
	t.Helper()
	now := time.Now()
	left := unit - time.Duration(now.UnixNano()%int64(unit))
	if left < need {
		t.Logf("waiting %v for the next %v window", left.Round(time.Millisecond), unit)
		time.Sleep(left + 50*time.Millisecond)
	}
}

func joinEnv(kv map[string]string) []string {
	out := make([]string, 0, len(kv))
	for k, v := range kv {
		out = append(out, k+"="+v)
	}
	return out
}

func mustHave(t testing.TB, what, path, hint string) {
	t.Helper()
	if strings.Contains(path, "/") {
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("%s: %v (%s)", what, err, hint)
		}
		return
	}
	if _, err := exec.LookPath(path); err != nil {
		t.Fatalf("%s: %s not found on PATH (%s)", what, path, hint)
	}
}
