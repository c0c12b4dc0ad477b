package interop

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	h "github.com/ratecell/ratecell-server/interop/harness"
	"google.golang.org/grpc/health/grpc_health_v1"
)

// TestGRPCHealth: the gRPC port also serves grpc.health.v1, SERVING.
func TestGRPCHealth(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		c := startConf(t, k, nil).Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp, err := grpc_health_v1.NewHealthClient(c.Conn()).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("grpc.health.v1 Check: %v", err)
		}
		if resp.Status != grpc_health_v1.HealthCheckResponse_SERVING {
			t.Errorf("grpc.health.v1 status %v, want SERVING", resp.Status)
		}
	})
}

// TestGRPCServerTLS: GRPC_SERVER_USE_TLS with a certificate and key; a
// client trusting that certificate gets answers.
func TestGRPCServerTLS(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		dir := t.TempDir()
		certPEM, keyPEM := selfSigned(t)
		certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
		if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		s := startConf(t, k, map[string]string{
			"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": certFile, "GRPC_SERVER_TLS_KEY": keyFile,
		})
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(certPEM)
		c := h.DialTLS(t, s.GRPCAddr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		hourly(t)
		run(t, c, step{h.Req("conf", 0, h.D("five", "tls")), "OK: OK 4 5/HOUR"})
		// A plaintext client is not answered.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := s.Client(t).Call(ctx, h.Req("conf", 0, h.D("five", "tls"))); err == nil {
			t.Error("a plaintext call to the TLS port succeeded")
		}
	})
}

func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(47),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// TestIgnoreDotFiles: with RUNTIME_IGNOREDOTFILES=true (the harness's
// setting) a broken dot file in the config directory is not read.
func TestIgnoreDotFiles(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := h.Start(t, h.Options{Kind: k, Configs: map[string]string{
			"conf.yaml": confYAML, ".conf.yaml.swp": "domain: conf\ndescriptors: [ {\n",
		}})
		c := s.Client(t)
		hourly(t)
		run(t, c, step{h.Req("conf", 0, h.D("five", "dot")), "OK: OK 4 5/HOUR"})
	})
}

// TestGracefulShutdown: SIGTERM ends the server with status 0.
func TestGracefulShutdown(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := startConf(t, k, nil)
		c := s.Client(t)
		run(t, c, step{h.Req("conf", 0, h.D("unl", "x")), fmt.Sprintf("OK: OK %d -", ^uint32(0))})
		if err := s.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(30 * time.Second); err != nil {
			t.Errorf("after SIGTERM: %v, want exit status 0", err)
		}
	}, h.Memory, h.Strict)
}

// TestRedisCommandsPerRequest: strict mode sends one RATECELL.CHECKALL per
// request, whatever its number of descriptors; the incumbent one INCRBY
// (and one EXPIRE) per descriptor.
func TestRedisCommandsPerRequest(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := startConf(t, k, nil)
		c := s.Client(t)
		hourly(t)
		// A first request opens the server's connections.
		c.Check(t, h.Req("conf", 0, h.D("five", "warm")))
		before, err := s.Redis.CommandStats()
		if err != nil {
			t.Fatal(err)
		}
		const n = 20
		for i := range n {
			c.Check(t, h.Req("conf", 0, h.D("addend", fmt.Sprint(i)), h.D("five", fmt.Sprint(i)), h.D("nested", "outer", "inner", "x")))
		}
		after, err := s.Redis.CommandStats()
		if err != nil {
			t.Fatal(err)
		}
		d := after.Sub(before)
		t.Logf("%s: %d requests of 3 descriptors: %s", k, n, d)
		switch k {
		case h.Strict:
			if d["ratecell.checkall"] != n || d.Total() != n {
				t.Errorf("strict: %d requests sent %s, want exactly %d ratecell.checkall and nothing else", n, d, n)
			}
		case h.Incumbent:
			if d["incrby"] != 3*n {
				t.Errorf("incumbent: %d requests sent %s, want %d incrby", n, d, 3*n)
			}
		}
	}, h.Incumbent, h.Strict)
}

// TestConfigDirFlag: `ratecell-server --config-dir DIR` with no RUNTIME_*
// variables.
func TestConfigDirFlag(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "conf.yaml"), []byte(confYAML), 0o644); err != nil {
			t.Fatal(err)
		}
		s := h.Start(t, h.Options{Kind: k, Args: []string{"--config-dir", dir}, NoRuntimeEnv: true})
		hourly(t)
		run(t, s.Client(t), step{h.Req("conf", 0, h.D("five", "flag")), "OK: OK 4 5/HOUR"})
	}, h.Memory)
}

// TestDebugPortMetrics: ratecell-server serves /metrics on DEBUG_PORT too,
// with the same counters.
func TestDebugPortMetrics(t *testing.T) {
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := startConf(t, k, nil)
		hourly(t)
		run(t, s.Client(t), step{h.Req("conf", 0, h.D("met", "dbg")), "OK: OK 1 2/HOUR"})
		h.Poll(t, 30*time.Second, "/metrics on the debug port", func() error {
			code, text, err := h.Fetch("GET", s.DebugURL+"/metrics", "", nil)
			if err != nil {
				return err
			}
			if code != http.StatusOK {
				return fmt.Errorf("status %d", code)
			}
			ms, err := parseMetrics(text)
			if err != nil {
				return err
			}
			if v, ok := sample(ms, "ratelimit_service_rate_limit_total_hits", map[string]string{"domain": "conf", "key1": "met"}); !ok || v != 1 {
				return fmt.Errorf("total_hits{conf,met} = %v (found %v), want 1", v, ok)
			}
			return nil
		})
	}, h.Memory, h.Strict)
}

// TestExtensions: ratecell's per-limit `period` and `algorithm`. A fixed
// window of period 1h counts like unit hour; a sliding window admits its
// count from empty; an unknown algorithm is a broken file, refused with
// the running config kept.
func TestExtensions(t *testing.T) {
	const ext = `domain: ext
descriptors:
  - key: period
    rate_limit: {period: 1h, requests_per_unit: 3}
  - key: sliding
    rate_limit: {algorithm: sliding_window, unit: hour, requests_per_unit: 3}
  - key: log
    rate_limit: {algorithm: sliding_log, period: 1h, requests_per_unit: 2}
`
	eachServer(t, func(t *testing.T, k h.Kind) {
		s := h.Start(t, h.Options{Kind: k, Configs: map[string]string{"ext.yaml": ext}})
		c := s.Client(t)
		hourly(t)
		for _, key := range []string{"period", "sliding", "log"} {
			admitted := 0
			for range 5 {
				if c.Check(t, h.Req("ext", 0, h.D(key, "a"))).OverallCode.String() == "OK" {
					admitted++
				}
			}
			want := 3
			if key == "log" {
				want = 2
			}
			if admitted != want {
				t.Errorf("%s: %d of 5 admitted, want %d", key, admitted, want)
			}
		}
		logBefore := len(s.Log())
		s.WriteConfig(t, "ext.yaml", strings.Replace(ext, "algorithm: sliding_window", "algorithm: no_such_algorithm", 1))
		h.Poll(t, 30*time.Second, "an error log line about the unknown algorithm", func() error {
			if strings.Contains(strings.ToLower(s.Log()[logBefore:]), "error") {
				return nil
			}
			return fmt.Errorf("no line with 'error' in the log since the rewrite")
		})
		if resp := c.Check(t, h.Req("ext", 0, h.D("sliding", "b"))); brief(resp) != "OK: OK 2 3/HOUR" {
			t.Errorf("after the refused file: sliding=b got %s, want OK: OK 2 3/HOUR (the running config)", brief(resp))
		}
	}, h.Memory, h.Strict)
}
