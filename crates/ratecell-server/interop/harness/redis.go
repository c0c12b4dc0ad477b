package harness

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Redis is a redis-server this package started on 127.0.0.1, stopped by the
// test's cleanup.
type Redis struct {
	Addr string
	proc *process
}

// StartRedis starts redis-server (REDIS_SERVER_BIN, else redis-server on
// PATH) on a free 127.0.0.1 port with no persistence, loading the Redis
// module at modulePath when it is not empty (ratecell's module, for the
// strict and leased backends). It returns once the server answers PING.
func StartRedis(t testing.TB, modulePath string) *Redis {
	t.Helper()
	bin := envOr("REDIS_SERVER_BIN", "redis-server")
	dir := t.TempDir()
	port := FreePort(t)
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}
	if modulePath != "" {
		if _, err := os.Stat(modulePath); err != nil {
			t.Fatalf("Redis module %s: %v (set RATECELL_REDIS_MODULE, or run scripts/server-tests.sh)", modulePath, err)
		}
		args = append(args, "--loadmodule", modulePath)
	}
	p := startProcess(t, "redis-server", bin, args, nil, filepath.Join(dir, "log"))
	r := &Redis{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), proc: p}
	err := pollUntil(startTimeout, func() error {
		if err := p.exited(); err != nil {
			return errStop{err}
		}
		reply, err := r.Do("PING")
		if err != nil {
			return err
		}
		if reply != "PONG" {
			return fmt.Errorf("PING answered %v", reply)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redis-server on %s did not answer PING: %v\n%s", r.Addr, err, p.logTail())
	}
	return r
}

// Do sends one command on a new connection and returns its reply: string
// for simple and bulk strings, int64, []any for arrays, nil for a null, and
// an error for a Redis error reply.
func (r *Redis) Do(args ...string) (any, error) {
	conn, err := net.DialTimeout("tcp", r.Addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(conn))
}

func readReply(rd *bufio.Reader) (any, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, fmt.Errorf("redis: %s", line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readReply(rd); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown reply %q", line)
}

// CommandStats is INFO commandstats: calls per command name.
type CommandStats map[string]int64

// CommandStats reads INFO commandstats.
func (r *Redis) CommandStats() (CommandStats, error) {
	return ReadCommandStats(r.Addr)
}

// ReadCommandStats reads INFO commandstats from the Redis at addr.
func ReadCommandStats(addr string) (CommandStats, error) {
	reply, err := (&Redis{Addr: addr}).Do("INFO", "commandstats")
	if err != nil {
		return nil, err
	}
	text, ok := reply.(string)
	if !ok {
		return nil, fmt.Errorf("INFO answered %T", reply)
	}
	stats := CommandStats{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, field := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("INFO line %q: %v", line, err)
				}
				stats[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return stats, nil
}

// Sub gives the calls made between before and s, leaving out the INFO
// commands that read them.
func (s CommandStats) Sub(before CommandStats) CommandStats {
	d := CommandStats{}
	for name, n := range s {
		if name == "info" {
			continue
		}
		if n-before[name] != 0 {
			d[name] = n - before[name]
		}
	}
	return d
}

// Total is the sum of the calls.
func (s CommandStats) Total() int64 {
	var n int64
	for _, v := range s {
		n += v
	}
	return n
}

// String lists the commands, most called first.
func (s CommandStats) String() string {
	names := make([]string, 0, len(s))
	for name := range s {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		if s[names[i]] != s[names[j]] {
			return s[names[i]] > s[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s=%d", name, s[name])
	}
	return strings.Join(parts, " ")
}
