// Command fleetnode is one Go node of the fleet of several languages
// (bindings/python/tests_redis/test_fleet_languages.py):
//
//	fleetnode ADDR KEY LIMIT PERIOD_NS START_NS RUN_NS
//
// checks KEY under a leased fixed window of LIMIT per PERIOD_NS kept at the
// Redis server ADDR, at the wall clock's times sent as AT, from START_NS
// for RUN_NS, and prints the times it admitted ("ADMITTED t...") and its
// count of checks ("CHECKS n").
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
	if len(os.Args) != 7 {
		fmt.Fprintln(os.Stderr, "usage: fleetnode ADDR KEY LIMIT PERIOD_NS START_NS RUN_NS")
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
	cfg := ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: limit, Period: time.Duration(period)}
	l, err := ratecellredis.NewLimiter(rdb, cfg, ratecellredis.Options{
		Mode: ratecellredis.Leased, SendAt: true, Skew: -1,
	})
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
		d, err := l.CheckStringAt(ctx, key, 1, t)
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
