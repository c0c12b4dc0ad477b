// Command fleetnode is one Go node of the fleet of several languages
// (bindings/python/tests_redis/test_fleet_languages.py):
//
//	fleetnode ADDR KEY LIMIT PERIOD_NS START_NS RUN_NS [ALGORITHM [TIMELINE]]
//
// checks KEY under a leased limit of ALGORITHM (fixed_window by default),
// LIMIT per PERIOD_NS, kept at the Redis server ADDR, from START_NS for
// RUN_NS, each check dated by the wall clock just before it; TIMELINE says
// how: "at" (the default) sends the dates as AT (Options.SendAt), "caller"
// passes them as the checks' At only, the server deciding grants on its own
// clock. Prints the times it admitted ("ADMITTED t...") and its count of
// checks ("CHECKS n").
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	ratecell "github.com/ratecell/ratecell-go"
	ratecellredis "github.com/ratecell/ratecell-go/redis"
	"github.com/redis/go-redis/v9"
)

func main() {
	if len(os.Args) < 7 || len(os.Args) > 9 {
		fmt.Fprintln(os.Stderr, "usage: fleetnode ADDR KEY LIMIT PERIOD_NS START_NS RUN_NS [ALGORITHM [TIMELINE]]")
		os.Exit(2)
	}
	algorithm, timeline := "fixed_window", "at"
	if len(os.Args) > 7 {
		algorithm = os.Args[7]
	}
	if len(os.Args) > 8 {
		timeline = os.Args[8]
	}
	alg, err := ratecell.ParseAlgorithm(algorithm)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	num := func(s string) uint64 {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		return n
	}
	key := os.Args[2]
	limit, period, start, run := num(os.Args[3]), num(os.Args[4]), num(os.Args[5]), num(os.Args[6])
	rdb := redis.NewClient(&redis.Options{Addr: os.Args[1]})
	defer rdb.Close()
	cfg := ratecell.Config{Algorithm: alg, Limit: limit, Period: time.Duration(period)}
	// One clock for the dates and the server (one machine): no skew with
	// AT; without, the default.
	opts := ratecellredis.Options{Mode: ratecellredis.Leased, SendAt: true, Skew: -1}
	if timeline == "caller" {
		opts = ratecellredis.Options{Mode: ratecellredis.Leased}
	}
	l, err := ratecellredis.NewLimiter(rdb, cfg, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer l.Close()
	ctx := context.Background()
	for uint64(time.Now().UnixNano()) < start {
		time.Sleep(100 * time.Microsecond)
	}
	var admitted []string
	checks := 0
	for end := start + run; ; {
		t := uint64(time.Now().UnixNano())
		if t >= end {
			break
		}
		checks++
		d, err := l.Check(ctx, ratecellredis.Request{Key: key, Cost: 1, At: t})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if d.Allowed {
			admitted = append(admitted, strconv.FormatUint(t, 10))
		}
	}
	fmt.Println("ADMITTED " + strings.Join(admitted, " "))
	fmt.Printf("CHECKS %d\n", checks)
}
