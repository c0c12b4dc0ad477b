// Package ratecellprom counts the outcomes of ratehttp's middleware on
// Prometheus counters: requests admitted, refused and refused in a dry run,
// per policy. It lives in its own Go module so that the core binding
// (github.com/ratecell/ratecell-go) depends on nothing; this one adds
// client_golang.
//
//	m, _ := ratecellprom.New(prometheus.DefaultRegisterer, "")
//	handler := ratehttp.Middleware(limits, ratehttp.Options{Observe: m.Observe})(mux)
//
// One counter, ratecell_http_requests_total by default, labelled policy
// (the RateLimit-Policy name) and outcome:
//
//   - admitted: the request was admitted; counted once for every policy.
//   - refused: this policy refused the request (a request several policies
//     refused counts once under each; a policy that would have admitted a
//     request another refused counts nothing).
//   - dry_run_refused: as refused, in a dry run (the request passed).
//
// Store failures decide nothing per policy: they are counted on a counter
// of their own, ratecell_http_store_errors_total, labelled outcome
// (unavailable: answered 503; failed_open: the request passed), through
// ratehttp.Options.OnStoreError:
//
//	ratehttp.Options{Observe: m.Observe, OnStoreError: m.StoreError}
package ratecellprom

import (
	"errors"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/ratecell/ratecell-go/ratehttp"
)

// DefaultName is the counter's name when New is given "".
const DefaultName = "ratecell_http_requests_total"

// StoreErrorsName is the store failures' counter.
const StoreErrorsName = "ratecell_http_store_errors_total"

// Metrics is the counters; Observe is ratehttp.Options.Observe and
// StoreError ratehttp.Options.OnStoreError.
type Metrics struct {
	vec *prometheus.CounterVec
	// failedOpen and unavailable: the store failures' two counters.
	failedOpen, unavailable prometheus.Counter
	// (policy, outcome) -> its counter: WithLabelValues hashes the labels
	// on every call.
	counters sync.Map
}

type labels struct{ policy, outcome string }

// New registers the counter (named name, or DefaultName) with reg and
// returns it; an error when reg already holds one of that name.
func New(reg prometheus.Registerer, name string) (*Metrics, error) {
	if name == "" {
		name = DefaultName
	}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: name,
		Help: "Rate-limited HTTP requests by policy and outcome (admitted, refused, dry_run_refused).",
	}, []string{"policy", "outcome"})
	if err := reg.Register(vec); err != nil {
		return nil, err
	}
	stores := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: StoreErrorsName,
		Help: "Failures of the rate-limit store by outcome (unavailable, failed_open).",
	}, []string{"outcome"})
	if err := reg.Register(stores); err != nil {
		// Several Metrics (one per counter name) in one registry share it.
		var already prometheus.AlreadyRegisteredError
		if !errors.As(err, &already) {
			reg.Unregister(vec)
			return nil, err
		}
		shared, ok := already.ExistingCollector.(*prometheus.CounterVec)
		if !ok {
			reg.Unregister(vec)
			return nil, err
		}
		stores = shared
	}
	return &Metrics{
		vec:         vec,
		failedOpen:  stores.WithLabelValues("failed_open"),
		unavailable: stores.WithLabelValues("unavailable"),
	}, nil
}

// StoreError counts one store failure (ratehttp.Options.OnStoreError).
func (m *Metrics) StoreError(_ *http.Request, _ error, failedOpen bool) {
	if failedOpen {
		m.failedOpen.Inc()
	} else {
		m.unavailable.Inc()
	}
}

func (m *Metrics) inc(policy, outcome string) {
	k := labels{policy, outcome}
	c, ok := m.counters.Load(k)
	if !ok {
		c, _ = m.counters.LoadOrStore(k, m.vec.WithLabelValues(policy, outcome))
	}
	c.(prometheus.Counter).Inc()
}

// Observe records one request's decisions (ratehttp.Options.Observe).
func (m *Metrics) Observe(items []ratehttp.LimitDecision, admitted, dryRun bool) {
	if admitted {
		for _, it := range items {
			m.inc(it.Name, "admitted")
		}
		return
	}
	outcome := "refused"
	if dryRun {
		outcome = "dry_run_refused"
	}
	for _, it := range items {
		if !it.Decision.Allowed {
			m.inc(it.Name, outcome)
		}
	}
}
