package ratehttp_test

// What the middleware adds to a hello-world handler, end to end over
// loopback with keep-alive clients. One server has the middleware, one has
// not; requests go to them in alternating rounds of 100 so that load from
// other processes on a shared machine hits both alike, and the benchmark
// reports each one's time per request, the ratio of the totals, and the
// median of the rounds' paired ratios (robust to a burst of load landing
// in one round, as the Rust and Python benches report). A third server
// sends the same two fields as fixed text, with no limiter: what net/http
// and its client spend on two more header lines, the floor of any
// middleware that emits them (fields-median-ratio):
//
//	go test -run '^$' -bench HelloWorld -benchtime 20000x ./ratehttp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	ratecell "github.com/ratecell/ratecell-go"
	"github.com/ratecell/ratecell-go/ratehttp"
)

func hit(b *testing.B, client *http.Client, url string, n int) time.Duration {
	start := time.Now()
	for i := 0; i < n; i++ {
		res, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			b.Fatalf("status %d", res.StatusCode)
		}
	}
	return time.Since(start)
}

func BenchmarkHelloWorld(b *testing.B) {
	// Never refuses in the run: the measured path is check + fields.
	l, err := ratecell.New(ratecell.Config{Algorithm: ratecell.GCRA, Limit: 1_000_000_000, Period: time.Second, Capacity: 1024})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	limits, err := ratehttp.FromLimiter(l)
	if err != nil {
		b.Fatal(err)
	}
	plain := httptest.NewServer(hello)
	defer plain.Close()
	limited := httptest.NewServer(ratehttp.Middleware(limits, ratehttp.Options{})(hello))
	defer limited.Close()
	pc, lc := plain.Client(), limited.Client()
	// The fields exactly as the middleware sends them for this limiter.
	res, err := lc.Get(limited.URL + "/")
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	policy, state := res.Header.Get("RateLimit-Policy"), res.Header.Get("RateLimit")
	if policy == "" || state == "" {
		b.Fatalf("the middleware sent no fields: %v", res.Header)
	}
	fields := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("RateLimit-Policy", policy)
		w.Header().Set("RateLimit", state)
		hello.ServeHTTP(w, r)
	}))
	defer fields.Close()
	fc := fields.Client()
	hit(b, pc, plain.URL+"/", 100)
	hit(b, lc, limited.URL+"/", 100)
	hit(b, fc, fields.URL+"/", 100)
	b.ResetTimer()
	var tp, tl time.Duration
	var ratios, fieldRatios []float64
	done := 0
	for done < b.N {
		n := min(100, b.N-done)
		p := hit(b, pc, plain.URL+"/", n)
		l := hit(b, lc, limited.URL+"/", n)
		f := hit(b, fc, fields.URL+"/", n)
		tp, tl = tp+p, tl+l
		ratios = append(ratios, float64(l)/float64(p))
		fieldRatios = append(fieldRatios, float64(f)/float64(p))
		done += n
	}
	sort.Float64s(ratios)
	sort.Float64s(fieldRatios)
	b.ReportMetric(float64(tp.Nanoseconds())/float64(b.N), "plain-ns/req")
	b.ReportMetric(float64(tl.Nanoseconds())/float64(b.N), "middleware-ns/req")
	b.ReportMetric(float64(tl)/float64(tp), "ratio")
	b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
	b.ReportMetric(fieldRatios[len(fieldRatios)/2], "fields-median-ratio")
}

// BenchmarkInProcess is the middleware's own cost, without the network:
// ServeHTTP on a recorder, with and without it, in alternating rounds.
func BenchmarkInProcess(b *testing.B) {
	l, err := ratecell.New(ratecell.Config{Algorithm: ratecell.GCRA, Limit: 1_000_000_000, Period: time.Second, Capacity: 1024})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	limits, err := ratehttp.FromLimiter(l)
	if err != nil {
		b.Fatal(err)
	}
	limited := ratehttp.Middleware(limits, ratehttp.Options{})(hello)
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	serve := func(h http.Handler, n int) time.Duration {
		start := time.Now()
		for i := 0; i < n; i++ {
			h.ServeHTTP(httptest.NewRecorder(), req)
		}
		return time.Since(start)
	}
	b.ResetTimer()
	var tp, tl time.Duration
	for done := 0; done < b.N; done += 1000 {
		n := min(1000, b.N-done)
		tp += serve(hello, n)
		tl += serve(limited, n)
	}
	b.ReportMetric(float64(tp.Nanoseconds())/float64(b.N), "plain-ns/req")
	b.ReportMetric(float64(tl.Nanoseconds())/float64(b.N), "middleware-ns/req")
}
