// Command http serves a hello-world handler behind ratehttp's middleware:
// the setup docs/HTTP.md shows, built by go vet and go test so the docs
// cannot drift from the package.
package main

import (
	"io"
	"log"
	"net/http"
	"time"

	ratecell "github.com/ratecell/ratecell-go"
	"github.com/ratecell/ratecell-go/ratehttp"
)

func main() {
	limiter, err := ratecell.New(ratecell.Config{Algorithm: ratecell.GCRA, Limit: 100, Period: time.Minute,
		Capacity: 100_000, Overflow: ratecell.OverflowEvict})
	if err != nil {
		log.Fatal(err)
	}
	limits, err := ratehttp.FromLimiter(limiter)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello") })
	// chi: r.Use(ratehttp.Middleware(limits, ratehttp.Options{})), the same func(http.Handler) http.Handler.
	handler := ratehttp.Middleware(limits, ratehttp.Options{})(mux)
	log.Fatal(http.ListenAndServe(":8080", handler))
}
