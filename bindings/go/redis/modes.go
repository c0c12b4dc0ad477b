package ratecellredis

// The three modes of SPEC.md section 8 (strict, cached_deny, leased), with a
// timeout on every command and a failure policy. The lease protocol and the
// local spending are the C library's (ratecell.Leases, ratecell.Denials):
// this file brings go-redis, the timeout and the refill goroutine.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	ratecell "github.com/ratecell/ratecell-go"
	"github.com/redis/go-redis/v9"
)

// Mode is how a limit kept in Redis is enforced.
type Mode int

const (
	// Strict sends one RATECELL.CHECK per check.
	Strict Mode = iota
	// CachedDeny is Strict, but a denial is remembered until its RetryAfter
	// and the key's checks meanwhile cost Redis nothing.
	CachedDeny
	// Leased spends units granted in batches (RATECELL.LEASE) on this node,
	// refilled in the background (gcra, token_bucket, fixed_window and
	// sliding_window only).
	Leased
)

// String is the mode's name in SPEC.md section 8: "strict",
// "cached_deny" or "leased".
func (m Mode) String() string {
	switch m {
	case Strict:
		return "strict"
	case CachedDeny:
		return "cached_deny"
	case Leased:
		return "leased"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// DefaultCommandTimeout is how long a NewLimiter command waits for Redis
// by default (SPEC.md section 8).
const DefaultCommandTimeout = 50 * time.Millisecond

// Options configure NewLimiter; the zero value is Strict, 50 ms, deny.
type Options struct {
	// Mode is Strict, CachedDeny or Leased.
	Mode Mode
	// Timeout bounds every command (0: DefaultCommandTimeout).
	Timeout time.Duration
	// Failure decides a check Redis did not answer: ratecell.FailDeny, or
	// ratecell.FailLocal (a limiter of this node's own, the limit and burst
	// divided by ExpectedNodes).
	Failure ratecell.FailurePolicy
	// ExpectedNodes is how many nodes share the limit (0: 1).
	ExpectedNodes uint32
	// Prefix is prepended to every key.
	Prefix string
	// Capacity is how many keys the node tracks (0: 65,536).
	Capacity uint64
	// SendAt (Leased) sends each check's time as AT: the server decides on
	// the node's timeline (explicit times). Strict and CachedDeny send AT
	// whenever a check has a time (CheckStringAt).
	SendAt bool
	// MaxGrant, Horizon, LeaseExpiry and Skew (Leased) are SPEC.md section
	// 8's W, H, E and clock-skew margin (0: their defaults; a negative Skew:
	// none).
	MaxGrant    uint64
	Horizon     time.Duration
	LeaseExpiry time.Duration
	Skew        time.Duration
}

// Stats are a limiter's counters.
type Stats struct {
	// Commands sent (each RATECELL.CHECK or RATECELL.LEASE).
	Commands uint64
	// Failures: commands with no answer in time, or an error.
	Failures uint64
	// Fallbacks: checks the failure policy decided.
	Fallbacks uint64
	// Lease is a leased limiter's grant counters (nil otherwise).
	Lease *ratecell.LeaseStats
}

// modal is what a limiter made by NewLimiter adds to New's.
type modal struct {
	mode    Mode
	timeout time.Duration
	sendAt  bool
	local   *ratecell.Limiter
	leases  *ratecell.Leases
	denials *ratecell.Denials

	commands, failures, fallbacks atomic.Uint64
	downFailures                  atomic.Uint32
	downUntil                     atomic.Uint64

	refills   chan job
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// job is a grant to fetch in the background, not before due.
type job struct {
	grant *ratecell.Grant
	due   time.Time
}

// refillQueue bounds the refills waiting for the goroutine: beyond it a
// refill is dropped, and its key fetches when it runs dry.
const refillQueue = 4096

// NewLimiter makes a limiter of cfg (Algorithm, Limit, Period, Burst,
// SubWindows) kept in Redis and checked in o.Mode, every command bounded
// by o.Timeout and a check Redis does not answer decided by o.Failure. A
// Leased limiter runs a refill goroutine until Close. A bad setting is an
// error naming it (for Leased, a *ratecell.Error: StatusNotLeasable,
// StatusInvalidMaxGrant, ...).
func NewLimiter(client Client, cfg ratecell.Config, o Options) (*Limiter, error) {
	l := New(client, cfg).WithPrefix(o.Prefix)
	m := &modal{mode: o.Mode, timeout: o.Timeout, sendAt: o.SendAt}
	if m.timeout == 0 {
		m.timeout = DefaultCommandTimeout
	}
	if m.timeout < 0 {
		return nil, fmt.Errorf("ratecell: invalid timeout %v: not positive", o.Timeout)
	}
	nodes := uint64(o.ExpectedNodes)
	if nodes == 0 {
		nodes = 1
	}
	capacity := o.Capacity
	if capacity == 0 {
		capacity = 65_536
	}
	// The policy's own limiter: strict and cached_deny checks, and a leased
	// key the node cannot track (the leases keep theirs).
	switch o.Failure {
	case ratecell.FailLocal:
		share := cfg
		share.Limit = max(cfg.Limit/nodes, 1)
		if cfg.Burst != 0 {
			share.Burst = max(cfg.Burst/nodes, 1)
		}
		share.Capacity = capacity
		local, err := ratecell.New(share)
		if err != nil {
			return nil, err
		}
		m.local = local
	case ratecell.FailDeny:
	default:
		return nil, &ratecell.Error{Op: "new", Status: ratecell.StatusInvalidFailure}
	}
	switch o.Mode {
	case Strict, CachedDeny:
		if o.Mode == CachedDeny {
			d, err := ratecell.NewDenials(o.Capacity)
			if err != nil {
				return nil, err
			}
			m.denials = d
		}
	case Leased:
		lc := cfg
		lc.Capacity = o.Capacity
		leases, err := ratecell.NewLeases(lc, ratecell.LeaseOptions{
			Failure: o.Failure, ExpectedNodes: o.ExpectedNodes, SendAt: o.SendAt,
			MaxGrant: o.MaxGrant, Horizon: o.Horizon, LeaseExpiry: o.LeaseExpiry, Skew: o.Skew,
			Prefix: []byte(o.Prefix),
		})
		if err != nil {
			return nil, err
		}
		m.leases = leases
		m.refills = make(chan job, refillQueue)
		m.stop = make(chan struct{})
		m.done = make(chan struct{})
		go m.run(l)
	default:
		return nil, fmt.Errorf("ratecell: invalid mode %d", o.Mode)
	}
	l.m = m
	return l, nil
}

// Close stops a leased limiter's refill goroutine and releases its leases;
// checks afterwards are errors (ratecell.ErrClosed). It does nothing for
// other limiters. Safe to call more than once.
func (l *Limiter) Close() error {
	m := l.m
	if m == nil || m.leases == nil {
		return nil
	}
	m.closeOnce.Do(func() {
		close(m.stop)
		<-m.done
		_ = m.leases.Close()
	})
	return nil
}

// Stats reads the counters of a limiter made by NewLimiter (zero for New's).
func (l *Limiter) Stats() Stats {
	m := l.m
	if m == nil {
		return Stats{}
	}
	s := Stats{Commands: m.commands.Load(), Failures: m.failures.Load(), Fallbacks: m.fallbacks.Load()}
	if m.leases != nil {
		ls := m.leases.Stats()
		s.Lease = &ls
		s.Fallbacks += ls.LeaseFallbacks
	}
	return s
}

// Mode is the limiter's mode (Strict for one made by New).
func (l *Limiter) Mode() Mode {
	if l.m == nil {
		return Strict
	}
	return l.m.mode
}

// errOutage marks a command Redis did not answer in time: the failure
// policy's, not the caller's.
var errOutage = errors.New("no answer")

// call runs one command within the timeout: its reply, errOutage when
// Redis did not answer (or the connection failed), or Redis's error reply.
func (l *Limiter) call(ctx context.Context, args ...any) ([]int64, error) {
	m := l.m
	m.commands.Add(1)
	tctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	type answer struct {
		reply []int64
		err   error
	}
	// The call returns at the deadline even when the client does not
	// watch its context (go-redis without ContextTimeoutEnabled reads
	// until its ReadTimeout): the command then ends in the background and
	// its answer is dropped. A grant dropped so is units lost, never
	// admissions added. Set ContextTimeoutEnabled so that it stops too.
	done := make(chan answer, 1)
	go func() {
		reply, err := l.client.Do(tctx, args...).Int64Slice()
		done <- answer{reply, err}
	}()
	var a answer
	select {
	case a = <-done:
	case <-tctx.Done():
		a.err = tctx.Err()
	}
	if a.err == nil {
		return a.reply, nil
	}
	m.failures.Add(1)
	if ctx.Err() != nil {
		return nil, ctx.Err() // the caller's own deadline or cancellation
	}
	var rerr redis.Error
	if errors.As(a.err, &rerr) && !errors.Is(a.err, context.DeadlineExceeded) {
		return nil, a.err
	}
	return nil, errOutage
}

// decide is a check of a Strict or CachedDeny limiter (run decides a
// Leased one).
func (l *Limiter) decide(ctx context.Context, key string, cost uint64, at bool, nowNs uint64) (ratecell.Decision, error) {
	if l.m.mode == CachedDeny {
		return l.cachedDeny(ctx, key, cost, at, nowNs)
	}
	return l.strict(ctx, key, cost, at, timeOf(at, nowNs))
}

func timeOf(at bool, nowNs uint64) uint64 {
	if at {
		return nowNs
	}
	return uint64(time.Now().UnixNano())
}

// redisCheck is Redis's decision, or errOutage while Redis does not answer
// (now, or within the backoff of the last failure).
func (l *Limiter) redisCheck(ctx context.Context, key string, cost uint64, at bool, now uint64) (ratecell.Decision, error) {
	m := l.m
	if now < m.downUntil.Load() {
		return ratecell.Decision{}, errOutage
	}
	args := append([]any{"RATECELL.CHECK"}, l.command(key, cost, at, now)...)
	reply, err := l.call(ctx, args...)
	if errors.Is(err, errOutage) {
		n := m.downFailures.Add(1)
		m.downUntil.Store(now + backoffNs(n))
		return ratecell.Decision{}, errOutage
	}
	if err != nil {
		return ratecell.Decision{}, fmt.Errorf("ratecell: RATECELL.CHECK %q: %w", key, err)
	}
	if m.downFailures.Load() != 0 {
		m.downFailures.Store(0)
	}
	return decision(reply)
}

// backoffNs is SPEC.md section 8's wait after the n-th failure in a row:
// 10 ms, doubling, at most one second.
func backoffNs(n uint32) uint64 {
	shift := min(max(n, 1)-1, 16)
	return min(uint64(10*time.Millisecond)<<shift, uint64(time.Second))
}

func (l *Limiter) strict(ctx context.Context, key string, cost uint64, at bool, now uint64) (ratecell.Decision, error) {
	d, err := l.redisCheck(ctx, key, cost, at, now)
	if errors.Is(err, errOutage) {
		return l.fallback(key, cost, now)
	}
	return d, err
}

func (l *Limiter) fallback(key string, cost uint64, now uint64) (ratecell.Decision, error) {
	m := l.m
	m.fallbacks.Add(1)
	if m.local != nil {
		return m.local.Check(request(key, cost, true, now))
	}
	return ratecell.Decision{
		Limit:      l.limit,
		RetryAfter: time.Duration(max(m.downUntil.Load()-now, 1)),
	}, nil
}

func request(key string, cost uint64, at bool, nowNs uint64) ratecell.Request {
	r := ratecell.Request{Key: ratecell.StringKey(key), Cost: cost, Peek: cost == 0}
	if at {
		r.At = nowNs
	}
	return r
}

func (l *Limiter) cachedDeny(ctx context.Context, key string, cost uint64, at bool, nowNs uint64) (ratecell.Decision, error) {
	m := l.m
	// The time a denial is remembered from is read before the command,
	// so the remembered wait never outlasts the one Redis gave.
	now := timeOf(at, nowNs)
	r := request(key, cost, true, now)
	if d, ok := m.denials.Check(r); ok {
		return d, nil
	}
	d, err := l.redisCheck(ctx, key, cost, at, now)
	if errors.Is(err, errOutage) {
		return l.fallback(key, cost, now)
	}
	if err == nil && !d.Allowed {
		m.denials.Remember(r, d)
	}
	return d, err
}

// leased is what a leased check does when its step is not StepDecided
// (run has the step, and d if it carries one): queue the refill, fetch
// the grant now, or ask Redis.
func (l *Limiter) leased(ctx context.Context, key string, cost uint64, at bool, nowNs uint64, step ratecell.Step, d *ratecell.Decision, g *ratecell.Grant) (ratecell.Decision, error) {
	m := l.m
	switch step {
	case ratecell.StepRefill:
		select {
		case m.refills <- job{grant: g}:
		default:
			g.Free() // queue full: the key fetches when it runs dry
		}
		return *d, nil
	case ratecell.StepFetch:
		defer g.Free()
		reply, err := l.lease(ctx, g)
		if err != nil && !errors.Is(err, errOutage) {
			return ratecell.Decision{}, err
		}
		// When the answer came, on the node's clock (0: the leases'
		// clock), or with SendAt the request's own time: a failure's probe
		// is due a delay after it.
		done := uint64(0)
		if m.sendAt {
			done = g.Info().AtNs
		}
		c, err := m.leases.Complete(g, reply, done)
		if err != nil {
			return ratecell.Decision{}, err
		}
		l.queueRetry(g, c, done)
		return c.Decision, nil
	}
	return l.strict(ctx, key, cost, at, timeOf(at, nowNs))
}

// lease sends the grant's RATECELL.LEASE: its integers, or nil with
// errOutage (no answer) or Redis's error.
func (l *Limiter) lease(ctx context.Context, g *ratecell.Grant) ([]int64, error) {
	cmd := g.Command()
	args := make([]any, len(cmd))
	for i, a := range cmd {
		args[i] = a
	}
	return l.call(ctx, args...)
}

// queueRetry queues a failed grant's retry, due when its backoff ends.
func (l *Limiter) queueRetry(g *ratecell.Grant, c ratecell.Completion, done uint64) {
	m := l.m
	if !c.Retry {
		return
	}
	retry, err := m.leases.Retry(g, c.RetryAtNs)
	if err != nil || retry == nil {
		return
	}
	if done == 0 {
		done = m.leases.NowNs()
	}
	wait := time.Duration(0)
	if c.RetryAtNs > done {
		wait = time.Duration(c.RetryAtNs - done)
	}
	select {
	case m.refills <- job{grant: retry, due: time.Now().Add(wait)}:
	default:
		retry.Free()
	}
}

// run fetches refills and retries off the request path until Close. A
// retry is kept once per key (one attempt per backoff step).
func (m *modal) run(l *Limiter) {
	defer close(m.done)
	var waiting []job
	retrying := map[string]bool{}
	timer := time.NewTimer(time.Second)
	defer timer.Stop()
	for {
		now := time.Now()
		for i := 0; i < len(waiting); {
			j := waiting[i]
			if j.due.After(now) {
				i++
				continue
			}
			waiting[i] = waiting[len(waiting)-1]
			waiting = waiting[:len(waiting)-1]
			delete(retrying, string(j.grant.Info().Key))
			l.fetchInBackground(j.grant)
		}
		next := time.Second
		for _, j := range waiting {
			next = min(next, time.Until(j.due))
		}
		timer.Reset(max(next, 0))
		select {
		case <-m.stop:
			for _, j := range waiting {
				j.grant.Free()
			}
			for {
				select {
				case j := <-m.refills:
					j.grant.Free()
				default:
					return
				}
			}
		case j := <-m.refills:
			if !j.due.IsZero() {
				k := string(j.grant.Info().Key)
				if retrying[k] {
					j.grant.Free()
					continue
				}
				retrying[k] = true
			}
			waiting = append(waiting, j)
		case <-timer.C:
		}
	}
}

func (l *Limiter) fetchInBackground(g *ratecell.Grant) {
	m := l.m
	defer g.Free()
	reply, err := l.lease(context.Background(), g)
	if err != nil {
		reply = nil // an error reply is no grant either
	}
	done := uint64(0)
	if m.sendAt {
		done = g.Info().AtNs
	}
	c, err := m.leases.Complete(g, reply, done)
	if err != nil {
		return
	}
	// queueRetry never blocks: from this goroutine, a full queue of its
	// own would otherwise wait forever.
	l.queueRetry(g, c, done)
}
