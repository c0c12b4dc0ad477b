// Command rlsload drives an RLS v3 server (envoyproxy/ratelimit or
// ratecell-server) with ShouldRateLimit calls from concurrent workers, each
// on its own gRPC connection, for a fixed time, and prints requests per
// second, p50 and p99 latency, the decisions, and — given the Redis the
// server uses — Redis commands per request from INFO commandstats before
// and after.
//
//	rlsload -addr 127.0.0.1:8081 -domain bench -key k -keys 1000 -workers 16 -duration 10s -redis 127.0.0.1:6379
//
// With -md LABEL it prints one Markdown table row instead (scripts/server-bench.sh).
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/ratecell/ratecell-server/interop/harness"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "the server's gRPC address")
	domain := flag.String("domain", "bench", "the rate limit domain")
	key := flag.String("key", "k", "the descriptor key")
	keys := flag.Int("keys", 1000, "descriptor values k0..k<keys-1>, drawn uniformly")
	workers := flag.Int("workers", 16, "concurrent workers, each with its own gRPC connection")
	duration := flag.Duration("duration", 10*time.Second, "how long to send")
	warmup := flag.Duration("warmup", time.Second, "sending before measuring starts (connections, leases, JIT-free but caches)")
	redisAddr := flag.String("redis", "", "the server's Redis, for commands per request (empty: not measured)")
	md := flag.String("md", "", "print one Markdown table row with this label instead of the text report")
	flag.Parse()
	if *keys < 1 || *workers < 1 {
		fmt.Fprintln(os.Stderr, "rlsload: -keys and -workers must be at least 1")
		os.Exit(2)
	}

	conns := make([]*grpc.ClientConn, *workers)
	for i := range conns {
		c, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	values := make([]string, *keys)
	for i := range values {
		values[i] = fmt.Sprintf("k%d", i)
	}

	// Warm-up: the same load, not measured.
	if *warmup > 0 {
		drive(conns, *domain, *key, values, *warmup)
	}
	var before harness.CommandStats
	if *redisAddr != "" {
		var err error
		if before, err = harness.ReadCommandStats(*redisAddr); err != nil {
			fatal(err)
		}
	}
	res := drive(conns, *domain, *key, values, *duration)
	var cmds harness.CommandStats
	if *redisAddr != "" {
		after, err := harness.ReadCommandStats(*redisAddr)
		if err != nil {
			fatal(err)
		}
		cmds = after.Sub(before)
	}
	if res.errors > 0 && res.n == 0 {
		fatal(fmt.Errorf("every request failed: %v", res.firstErr))
	}

	rps := float64(res.n) / res.elapsed.Seconds()
	p50, p99 := res.percentile(0.50), res.percentile(0.99)
	perReq := "n/a"
	if cmds != nil {
		perReq = fmt.Sprintf("%.3f", float64(cmds.Total())/float64(res.n))
	}
	if *md != "" {
		fmt.Printf("| %s | %.0f | %s | %s | %s | %d | %d |\n", *md, rps, us(p50), us(p99), perReq, res.over, res.errors)
		return
	}
	fmt.Printf("requests     %d in %v (%d workers, %d descriptor values)\n", res.n, res.elapsed.Round(time.Millisecond), *workers, *keys)
	fmt.Printf("requests/s   %.0f\n", rps)
	fmt.Printf("p50          %s\np99          %s\n", us(p50), us(p99))
	fmt.Printf("decisions    %d OK, %d OVER_LIMIT, %d errors\n", res.n-res.over-res.errors, res.over, res.errors)
	if res.firstErr != nil {
		fmt.Printf("first error  %v\n", res.firstErr)
	}
	if cmds != nil {
		fmt.Printf("redis        %s commands per request (%s)\n", perReq, cmds)
	}
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/1e3) }

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "rlsload:", err)
	os.Exit(1)
}

type result struct {
	n, over, errors int
	firstErr        error
	latencies       []time.Duration
	elapsed         time.Duration
}

func (r *result) percentile(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	return r.latencies[min(len(r.latencies)-1, int(p*float64(len(r.latencies))))]
}

// drive sends from one worker per connection until d has passed and
// merges what they saw.
func drive(conns []*grpc.ClientConn, domain, key string, values []string, d time.Duration) *result {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	results := make([]result, len(conns))
	var wg sync.WaitGroup
	start := time.Now()
	for i, conn := range conns {
		wg.Add(1)
		go func(w int, client rls.RateLimitServiceClient) {
			defer wg.Done()
			r := &results[w]
			rng := rand.New(rand.NewPCG(uint64(w), 47))
			req := &rls.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{{
				Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: key}},
			}}}
			for ctx.Err() == nil {
				req.Descriptors[0].Entries[0].Value = values[rng.IntN(len(values))]
				callCtx, callCancel := context.WithTimeout(context.Background(), 10*time.Second)
				t0 := time.Now()
				resp, err := client.ShouldRateLimit(callCtx, req)
				lat := time.Since(t0)
				callCancel()
				r.n++
				switch {
				case err != nil:
					r.errors++
					if r.firstErr == nil {
						r.firstErr = err
					}
				case resp.OverallCode == rls.RateLimitResponse_OVER_LIMIT:
					r.over++
				}
				r.latencies = append(r.latencies, lat)
			}
		}(i, rls.NewRateLimitServiceClient(conn))
	}
	wg.Wait()
	total := &result{elapsed: time.Since(start)}
	for _, r := range results {
		total.n += r.n
		total.over += r.over
		total.errors += r.errors
		if total.firstErr == nil {
			total.firstErr = r.firstErr
		}
		total.latencies = append(total.latencies, r.latencies...)
	}
	slices.Sort(total.latencies)
	return total
}
