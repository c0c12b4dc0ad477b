package harness

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Kind names a server under test and its backend.
type Kind string

const (
	// Incumbent is envoyproxy/ratelimit's service_cmd on a plain Redis.
	Incumbent Kind = "incumbent"
	// Memory is ratecell-server with its in-memory backend.
	Memory Kind = "memory"
	// Strict is ratecell-server on Redis with ratecell's module, one
	// RATECELL.CHECKALL per request.
	Strict Kind = "strict"
	// Leased is ratecell-server on Redis with ratecell's module, deciding
	// locally on leases.
	Leased Kind = "leased"
)

// Ratecell reports whether k is one of ratecell-server's backends.
func (k Kind) Ratecell() bool { return k != Incumbent }

// NeedsRedis reports whether the server needs a Redis, and whether that
// Redis needs ratecell's module.
func (k Kind) NeedsRedis() (redis, module bool) {
	switch k {
	case Incumbent:
		return true, false
	case Strict, Leased:
		return true, true
	}
	return false, false
}

// Kinds is the servers the tests run against: INTEROP_SERVERS, a comma
// list of incumbent, memory, strict and leased, by default
// "incumbent,memory,strict".
func Kinds() []Kind {
	var out []Kind
	for _, s := range strings.Split(envOr("INTEROP_SERVERS", "incumbent,memory,strict"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, Kind(s))
		}
	}
	return out
}

// Enabled reports whether k is in Kinds().
func Enabled(k Kind) bool {
	for _, e := range Kinds() {
		if e == k {
			return true
		}
	}
	return false
}

// RepoRoot is the ratecell checkout this module sits in
// (crates/ratecell-server/interop/harness is four levels down).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", "..", ".."))
}

func targetDir() string {
	t := os.Getenv("CARGO_TARGET_DIR")
	if t == "" {
		return filepath.Join(RepoRoot(), "target")
	}
	if !filepath.IsAbs(t) {
		t = filepath.Join(RepoRoot(), t)
	}
	return t
}

// RatecellServerBin is $RATECELL_SERVER_BIN, else target/debug/ratecell-server.
func RatecellServerBin() string {
	return envOr("RATECELL_SERVER_BIN", filepath.Join(targetDir(), "debug", "ratecell-server"))
}

// RatecellModule is $RATECELL_REDIS_MODULE, else target/debug/libratecell_redis.so.
func RatecellModule() string {
	return envOr("RATECELL_REDIS_MODULE", filepath.Join(targetDir(), "debug", "libratecell_redis.so"))
}

// IncumbentBin is $RATELIMIT_SERVICE_BIN, else service_cmd on PATH.
func IncumbentBin() string { return envOr("RATELIMIT_SERVICE_BIN", "service_cmd") }

// IncumbentClientBin is $RATELIMIT_CLIENT_BIN, else client_cmd on PATH.
func IncumbentClientBin() string { return envOr("RATELIMIT_CLIENT_BIN", "client_cmd") }

const buildHint = "run scripts/server-tests.sh, which builds it, or set the variable"

// Options says which server to start and with what.
type Options struct {
	Kind Kind
	// Configs maps file names (ending in .yaml) to their YAML.
	Configs map[string]string
	// Env adds to or overrides the environment the server gets.
	Env map[string]string
	// Redis is the Redis to use; nil starts one for the server when its
	// kind needs one (with ratecell's module for Strict and Leased).
	Redis *Redis
	// Args are command-line arguments for the server.
	Args []string
	// NoRuntimeEnv leaves out the RUNTIME_* variables (for --config-dir).
	NoRuntimeEnv bool
}

// Server is a running rate limit service.
type Server struct {
	Kind Kind
	// HTTP is the base URL of the HTTP port (/json, /healthcheck,
	// /forward-auth/...).
	HTTP string
	// GRPCAddr is host:port of the RLS gRPC port.
	GRPCAddr string
	// DebugURL is the base URL of the debug port.
	DebugURL string
	// MetricsURL is the Prometheus endpoint (USE_PROMETHEUS=true,
	// PROMETHEUS_ADDR, PROMETHEUS_PATH=/metrics), which both servers serve.
	MetricsURL string
	// Redis is the server's Redis, if it has one.
	Redis *Redis

	configDir string
	stageDir  string
	proc      *process
}

// Start starts the server described by o, with its config files in a fresh
// runtime directory (ROOT/ratelimit/config), and returns once /healthcheck
// answers 200 and the gRPC and metrics ports accept connections.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	root := t.TempDir()
	s := &Server{Kind: o.Kind, configDir: filepath.Join(root, "ratelimit", "config"), stageDir: filepath.Join(root, "stage")}
	for _, d := range []string{s.configDir, s.stageDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range o.Configs {
		s.WriteConfig(t, name, text)
	}
	httpPort, grpcPort, debugPort, promPort := FreePort(t), FreePort(t), FreePort(t), FreePort(t)
	s.HTTP = fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	s.GRPCAddr = fmt.Sprintf("127.0.0.1:%d", grpcPort)
	s.DebugURL = fmt.Sprintf("http://127.0.0.1:%d", debugPort)
	s.MetricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", promPort)
	env := map[string]string{
		"USE_STATSD":             "false",
		"USE_PROMETHEUS":         "true",
		"PROMETHEUS_ADDR":        fmt.Sprintf("127.0.0.1:%d", promPort),
		"PROMETHEUS_PATH":        "/metrics",
		"STATS_FLUSH_INTERVAL":   "100ms",
		"LOG_LEVEL":              "warn",
		"RUNTIME_ROOT":           root,
		"RUNTIME_SUBDIRECTORY":   "ratelimit",
		"RUNTIME_WATCH_ROOT":     "false",
		"RUNTIME_APPDIRECTORY":   "config",
		"RUNTIME_IGNOREDOTFILES": "true",
		"HOST":                   "127.0.0.1",
		"PORT":                   strconv.Itoa(httpPort),
		"GRPC_HOST":              "127.0.0.1",
		"GRPC_PORT":              strconv.Itoa(grpcPort),
		"DEBUG_HOST":             "127.0.0.1",
		"DEBUG_PORT":             strconv.Itoa(debugPort),
		// Neither server may reach for a Redis it was not given.
		"REDIS_URL": "",
	}
	needRedis, needModule := o.Kind.NeedsRedis()
	if needRedis {
		s.Redis = o.Redis
		if s.Redis == nil {
			module := ""
			if needModule {
				module = RatecellModule()
			}
			s.Redis = StartRedis(t, module)
		}
		env["REDIS_SOCKET_TYPE"] = "tcp"
		env["REDIS_URL"] = s.Redis.Addr
		env["BACKEND_TYPE"] = "redis"
	}
	var bin string
	switch o.Kind {
	case Incumbent:
		bin = IncumbentBin()
		mustHave(t, "envoyproxy/ratelimit service_cmd", bin, "RATELIMIT_SERVICE_BIN; "+buildHint)
	case Memory, Strict, Leased:
		bin = RatecellServerBin()
		mustHave(t, "ratecell-server", bin, "RATECELL_SERVER_BIN; "+buildHint)
		switch o.Kind {
		case Memory:
			env["BACKEND_TYPE"] = "memory"
			delete(env, "REDIS_URL")
		case Strict:
			env["RATECELL_REDIS_MODE"] = "strict"
		case Leased:
			env["RATECELL_REDIS_MODE"] = "leased"
		}
	default:
		t.Fatalf("unknown server kind %q", o.Kind)
	}
	if o.NoRuntimeEnv {
		for _, k := range []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_WATCH_ROOT", "RUNTIME_APPDIRECTORY", "RUNTIME_IGNOREDOTFILES"} {
			delete(env, k)
		}
	}
	for k, v := range o.Env {
		env[k] = v
	}
	if env["REDIS_URL"] == "" {
		delete(env, "REDIS_URL")
	}
	s.proc = startProcess(t, string(o.Kind), bin, o.Args, joinEnv(env), filepath.Join(root, "server.log"))
	err := pollUntil(startTimeout, func() error {
		if err := s.proc.exited(); err != nil {
			return errStop{err}
		}
		for _, addr := range []string{s.GRPCAddr, env["PROMETHEUS_ADDR"]} {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return err
			}
			c.Close()
		}
		code, _, err := s.Get("/healthcheck")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/healthcheck answered %d", code)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s did not become ready: %v\n%s", o.Kind, err, s.proc.logTail())
	}
	return s
}

// Get fetches a path of the HTTP port and returns status and body.
func (s *Server) Get(path string) (int, string, error) {
	return Fetch("GET", s.HTTP+path, "", nil)
}

// Post posts body to a path of the HTTP port.
func (s *Server) Post(path, body string) (int, string, error) {
	return Fetch("POST", s.HTTP+path, body, nil)
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// Fetch makes one HTTP request and returns status and body.
func Fetch(method, url, body string, header http.Header) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// WriteConfig writes (or rewrites) a config file atomically: written
// outside the watched directory, then renamed into it, so the server never
// reads half a file.
func (s *Server) WriteConfig(t testing.TB, name, text string) {
	t.Helper()
	tmp := filepath.Join(s.stageDir, name)
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.configDir, name)); err != nil {
		t.Fatal(err)
	}
}

// RemoveConfig removes a config file.
func (s *Server) RemoveConfig(t testing.TB, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(s.configDir, name)); err != nil {
		t.Fatal(err)
	}
}

// ConfigDir is the directory the server reads its YAML files from.
func (s *Server) ConfigDir() string { return s.configDir }

// Log is the server's output so far.
func (s *Server) Log() string { return s.proc.Log() }

// Signal sends sig to the server process.
func (s *Server) Signal(sig syscall.Signal) error { return s.proc.signal(sig) }

// Wait waits (at most timeout) for the server to exit and returns how it
// exited: nil for status 0.
func (s *Server) Wait(timeout time.Duration) error {
	select {
	case <-s.proc.done:
		return s.proc.waitErr
	case <-time.After(timeout):
		return fmt.Errorf("%s still running after %v", s.Kind, timeout)
	}
}

// Metrics fetches the Prometheus text.
func (s *Server) Metrics() (string, error) {
	code, body, err := Fetch("GET", s.MetricsURL, "", nil)
	if err != nil {
		return "", err
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("%s answered %d", s.MetricsURL, code)
	}
	return body, nil
}
