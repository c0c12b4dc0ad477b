package ratecellprom_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	ratecell "github.com/ratecell/ratecell-go"
	ratecellprom "github.com/ratecell/ratecell-go/prometheus"
	"github.com/ratecell/ratecell-go/ratehttp"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := (&http.Client{Timeout: 20 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(body)
}

func serve(t *testing.T, name string, limit uint64, opts ratehttp.Options) *httptest.Server {
	t.Helper()
	l, err := ratecell.New(ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: limit, Period: time.Hour, Capacity: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	limits, err := ratehttp.Single(name, limit, time.Hour, l)
	if err != nil {
		t.Fatal(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello") })
	srv := httptest.NewServer(ratehttp.Middleware(limits, opts)(hello))
	t.Cleanup(srv.Close)
	return srv
}

func TestOutcomesPerPolicyAreScraped(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := ratecellprom.New(reg, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ratecellprom.New(reg, ""); err == nil {
		t.Fatal("a second counter of the same name registered")
	}
	api := serve(t, "api", 2, ratehttp.Options{Observe: m.Observe})
	trial := serve(t, "trial", 1, ratehttp.Options{Observe: m.Observe, DryRun: true})
	var got []int
	for i := 0; i < 3; i++ {
		s, _ := get(t, api.URL+"/")
		got = append(got, s)
	}
	for i := 0; i < 3; i++ {
		s, _ := get(t, trial.URL+"/")
		got = append(got, s)
	}
	if want := []int{200, 200, 429, 200, 200, 200}; !slices.Equal(got, want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	scrape := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(scrape.Close)
	status, text := get(t, scrape.URL+"/metrics")
	if status != 200 {
		t.Fatal(status)
	}
	for _, line := range []string{
		`ratecell_http_requests_total{outcome="admitted",policy="api"} 2`,
		`ratecell_http_requests_total{outcome="refused",policy="api"} 1`,
		`ratecell_http_requests_total{outcome="admitted",policy="trial"} 1`,
		`ratecell_http_requests_total{outcome="dry_run_refused",policy="trial"} 2`,
	} {
		if !strings.Contains(text, line) {
			t.Fatalf("no %q in\n%s", line, text)
		}
	}
}

type broken struct{}

func (broken) Check(context.Context, []byte, uint64) ([]ratehttp.LimitDecision, error) {
	return nil, errors.New("store down")
}

func TestStoreFailuresAreCountedByOutcome(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := ratecellprom.New(reg, "")
	if err != nil {
		t.Fatal(err)
	}
	// A second Metrics under another name shares the failures' counter.
	other, err := ratecellprom.New(reg, "other_requests_total")
	if err != nil {
		t.Fatal(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello") })
	closed := httptest.NewServer(ratehttp.Middleware(broken{}, ratehttp.Options{Observe: m.Observe, OnStoreError: m.StoreError})(hello))
	t.Cleanup(closed.Close)
	open := httptest.NewServer(ratehttp.Middleware(broken{}, ratehttp.Options{Observe: other.Observe, OnStoreError: other.StoreError, FailOpen: true})(hello))
	t.Cleanup(open.Close)
	var got []int
	for i := 0; i < 3; i++ {
		s, _ := get(t, closed.URL+"/")
		got = append(got, s)
	}
	for i := 0; i < 2; i++ {
		s, _ := get(t, open.URL+"/")
		got = append(got, s)
	}
	if want := []int{503, 503, 503, 200, 200}; !slices.Equal(got, want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	scrape := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(scrape.Close)
	_, text := get(t, scrape.URL+"/metrics")
	for _, line := range []string{
		`ratecell_http_store_errors_total{outcome="unavailable"} 3`,
		`ratecell_http_store_errors_total{outcome="failed_open"} 2`,
	} {
		if !strings.Contains(text, line) {
			t.Fatalf("no %q in\n%s", line, text)
		}
	}
	// A failure decides nothing per policy.
	if strings.Contains(text, "ratecell_http_requests_total{") {
		t.Fatalf("a failure counted per policy:\n%s", text)
	}
}
