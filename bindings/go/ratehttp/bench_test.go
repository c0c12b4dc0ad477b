package ratehttp_test

// What the middleware adds to a hello-world handler, end to end over
// loopback with a keep-alive client: run the two sub-benchmarks in one
// invocation and compare, e.g.
//
//	go test -run '^$' -bench HelloWorld -count 10 ./ratehttp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	ratecell "github.com/ratecell/ratecell-go"
	"github.com/ratecell/ratecell-go/ratehttp"
)

func benchServer(b *testing.B, h http.Handler) {
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := srv.Client()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := client.Get(srv.URL + "/")
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			b.Fatalf("status %d", res.StatusCode)
		}
	}
}

func BenchmarkHelloWorld(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchServer(b, hello) })
	b.Run("middleware", func(b *testing.B) {
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
		benchServer(b, ratehttp.Middleware(limits, ratehttp.Options{})(hello))
	})
}
