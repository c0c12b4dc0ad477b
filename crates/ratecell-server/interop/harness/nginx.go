package harness

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Nginx is an nginx this package started in the foreground with its own
// prefix directory, stopped by the test's cleanup.
type Nginx struct {
	// URL is the base URL of its one server.
	URL  string
	Port int

	bin, dir string
	proc     *process
}

// NginxBin is $NGINX_BIN, else nginx on PATH, else /usr/sbin/nginx.
func NginxBin() string {
	if b := os.Getenv("NGINX_BIN"); b != "" {
		return b
	}
	if b, err := exec.LookPath("nginx"); err == nil {
		return b
	}
	return "/usr/sbin/nginx"
}

// StartNginx starts nginx with the http{} server blocks that body(port)
// returns, where port is the free port its server must listen on, and
// waits until GET /_nginx_health answers 200 (the caller's server must
// define `location = /_nginx_health { return 200; }`).
func StartNginx(t testing.TB, body func(port int) string) *Nginx {
	t.Helper()
	bin := NginxBin()
	mustHave(t, "nginx", bin, "NGINX_BIN; apt-get install nginx-light")
	dir := t.TempDir()
	// Workers may run as another user: they need to reach the temp dirs.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	n := &Nginx{bin: bin, dir: dir, Port: FreePort(t)}
	n.URL = fmt.Sprintf("http://127.0.0.1:%d", n.Port)
	n.WriteConfig(t, body(n.Port))
	n.proc = startProcess(t, "nginx", bin, n.args(), nil, filepath.Join(dir, "stdout.log"))
	err := pollUntil(startTimeout, func() error {
		if err := n.proc.exited(); err != nil {
			return errStop{err}
		}
		code, _, err := Fetch("GET", n.URL+"/_nginx_health", "", nil)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/_nginx_health answered %d", code)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("nginx did not become ready: %v\n%s\n%s", err, n.proc.logTail(), n.ErrorLog())
	}
	return n
}

func (n *Nginx) args() []string {
	return []string{"-p", n.dir, "-c", filepath.Join(n.dir, "nginx.conf"), "-e", filepath.Join(n.dir, "error.log")}
}

// WriteConfig writes nginx.conf around the given http{} contents.
func (n *Nginx) WriteConfig(t testing.TB, httpBody string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "daemon off;\nmaster_process on;\nworker_processes 1;\npid %s/nginx.pid;\n", n.dir)
	fmt.Fprintf(&b, "error_log %s/error.log notice;\nevents { worker_connections 256; }\n", n.dir)
	b.WriteString("http {\n    access_log off;\n")
	for _, tmp := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&b, "    %s_temp_path %s/%s_temp;\n", tmp, n.dir, tmp)
	}
	b.WriteString(httpBody)
	b.WriteString("\n}\n")
	if err := os.WriteFile(filepath.Join(n.dir, "nginx.conf"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Reload runs nginx -s reload, which signals the master (found through
// the pid file) to re-read its configuration and replace its workers.
func (n *Nginx) Reload() error {
	out, err := exec.Command(n.bin, append(n.args(), "-s", "reload")...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("nginx -s reload: %v\n%s", err, out)
	}
	return nil
}

// ErrorLog is nginx's error log so far (notice level: reloads show).
func (n *Nginx) ErrorLog() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "error.log"))
	return string(b)
}
