package ratecell

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

const tiersT0 = uint64(1_700_000_000_000_000_000)

// Each key is held to the tier its check names; a key moving tiers keeps
// what it spent; checks that name no tier are tier 0's.
func TestTiersHoldEachKeyToItsTier(t *testing.T) {
	limits := []uint64{3, 30, 300}
	var tiers []Config
	for _, n := range limits {
		tiers = append(tiers, Config{Algorithm: FixedWindow, Limit: n, Period: time.Minute, Capacity: 100})
	}
	lim, err := newTiered(tiers)
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	if lim.Tiers() != 3 {
		t.Fatalf("Tiers() = %d", lim.Tiers())
	}
	for tier, want := range limits {
		got := uint64(0)
		for i := 0; i < 400; i++ {
			d, err := lim.Check(Request{Key: Uint64Key(uint64(tier)), At: tiersT0, Tier: tier})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				got++
			}
		}
		if got != want {
			t.Errorf("tier %d admitted %d, want %d", tier, got, want)
		}
	}
	// Key 1 spent 30 as paid: nothing as free, 270 left as internal.
	if d, _ := lim.Check(Request{Key: Uint64Key(1), At: tiersT0}); d.Allowed {
		t.Error("a paid key's spend does not count as free")
	}
	if d, _ := lim.Check(Request{Key: Uint64Key(1), Peek: true, At: tiersT0, Tier: 2}); d.Remaining != 270 || d.Limit != 300 {
		t.Errorf("internal peek: %+v", d)
	}
	if d, _ := lim.Check(Request{Key: BytesKey([]byte("k")), Cost: 5, At: tiersT0, Tier: 1}); d.Remaining != 25 {
		t.Errorf("bytes: %+v", d)
	}
	if d, _ := lim.Check(Request{Key: Uint64Key(9), Peek: true, At: tiersT0}); d.Limit != 3 {
		t.Errorf("no tier named is tier 0: %+v", d)
	}
	if d, err := lim.Check(Request{Key: Uint64Key(10), Tier: 1}); err != nil || !d.Allowed || d.Limit != 30 {
		t.Errorf("now: %+v %v", d, err)
	}
	if d, err := lim.Check(Request{Key: BytesKey([]byte("z")), Tier: 2}); err != nil || !d.Allowed || d.Limit != 300 {
		t.Errorf("bytes now: %+v %v", d, err)
	}
	for _, tier := range []int{3, -1, 1 << 40} {
		if _, err := lim.Check(Request{Key: Uint64Key(50), At: tiersT0, Tier: tier}); !errors.Is(err, ErrInvalidTier) {
			t.Errorf("tier %d: %v", tier, err)
		}
	}
	if d, _ := lim.Check(Request{Key: Uint64Key(50), Peek: true, At: tiersT0, Tier: 2}); d.Remaining != 300 {
		t.Errorf("a refused tier spent something: %+v", d)
	}
	lim.Close()
	if _, err := lim.Check(Request{Key: Uint64Key(1)}); !errors.Is(err, ErrClosed) {
		t.Errorf("closed: %v", err)
	}
	if lim.Tiers() != 0 {
		t.Error("Tiers() of a closed limiter")
	}
}

// Goroutines at one instant admit exactly each key's tier's limit.
func TestTiersUnderGoroutinesAdmitExactlyEachTiersLimit(t *testing.T) {
	limits := []uint64{5, 50, 500}
	var tiers []Config
	for _, n := range limits {
		tiers = append(tiers, Config{Algorithm: GCRA, Limit: n, Period: time.Hour, Capacity: 100})
	}
	lim, err := newTiered(tiers)
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	const keys = 12
	var admitted [keys]uint64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine [keys]uint64
			for round := 0; round < 300; round++ {
				for k := 0; k < keys; k++ {
					d, err := lim.Check(Request{Key: Uint64Key(uint64(k)), At: tiersT0, Tier: k % 3})
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						mine[k]++
					}
				}
			}
			mu.Lock()
			for k := range mine {
				admitted[k] += mine[k]
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for k, got := range admitted {
		if got != limits[k%3] {
			t.Errorf("key %d (tier %d) admitted %d, want %d", k, k%3, got, limits[k%3])
		}
	}
}

func TestTiersOfSeveralLimitsAndBadInput(t *testing.T) {
	rate := Config{Algorithm: GCRA, Limit: 1, Period: time.Second, Capacity: 10}
	day := Config{Algorithm: FixedWindow, Limit: 3, Period: 24 * time.Hour, Capacity: 10}
	paidRate := rate
	paidRate.Limit = 100
	paidDay := day
	paidDay.Limit = 50
	lim, err := NewWith(Options{Tiers: [][]Config{{rate, day}, {paidRate, paidDay}}})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	if d, _ := lim.Check(Request{Key: Uint64Key(4), Cost: 40, At: tiersT0, Tier: 1}); !d.Allowed {
		t.Error("paid: 40 of 100 now and 50 a day")
	}
	m, err := lim.CheckEach(Request{Key: Uint64Key(4), At: tiersT0})
	if err != nil || m.Allowed || len(m.Limits) != 2 || m.DeniedBy < 0 {
		t.Errorf("free after 40 paid: %+v %v", m, err)
	}

	gcra := Config{Algorithm: GCRA, Limit: 5, Period: time.Second, Capacity: 10}
	window := Config{Algorithm: FixedWindow, Limit: 5, Period: time.Minute, Capacity: 10}
	otherPeriod := window
	otherPeriod.Period = time.Hour
	otherCapacity := gcra
	otherCapacity.Capacity = 11
	keyless := gcra
	keyless.Capacity = 0
	for _, c := range []struct {
		tiers [][]Config
		want  error
	}{
		{nil, ErrInvalidLength},
		{make([][]Config, MaxTiers+1), ErrInvalidLength},
		{[][]Config{{gcra}, {gcra, gcra}}, ErrInvalidLength},
		{[][]Config{{gcra}, {window}}, ErrInvalidAlgorithm},
		{[][]Config{{window}, {otherPeriod}}, ErrInvalidPeriod},
		{[][]Config{{gcra}, {otherCapacity}}, ErrInvalidCapacity},
		{[][]Config{{keyless}, {keyless}}, ErrInvalidCapacity},
	} {
		if _, err := NewWith(Options{Tiers: c.tiers}); !errors.Is(err, c.want) {
			t.Errorf("%d tiers: %v, want %v", len(c.tiers), err, c.want)
		}
	}
	plain, err := New(gcra)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if plain.Tiers() != 1 {
		t.Error("a limiter without tiers has one")
	}
	if _, err := plain.Check(Request{Key: Uint64Key(1), At: tiersT0, Tier: 1}); !errors.Is(err, ErrInvalidTier) {
		t.Errorf("tier 1 of 1: %v", err)
	}
}

// A batch names a tier per request and decides as the checks one by one;
// a tier out of range anywhere decides nothing. Acquire waits for the
// named tier.
func TestTiersBatchAndAcquireNameTheTier(t *testing.T) {
	free := Config{Algorithm: TokenBucket, Limit: 3, Period: time.Hour, Capacity: 100}
	paid := free
	paid.Limit = 30
	lim, err := newTiered([]Config{free, paid})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	keys := []uint64{1, 1, 1, 1, 2, 2}
	tiers := []uint32{0, 0, 0, 0, 1, 1}
	allowed := make([]bool, len(keys))
	decisions := make([]Decision, len(keys))
	if err := lim.CheckBatch(Batch{Keys: keys, Tiers: tiers, At: tiersT0}, allowed, decisions); err != nil {
		t.Fatal(err)
	}
	want := []bool{true, true, true, false, true, true}
	for i := range want {
		if allowed[i] != want[i] {
			t.Errorf("request %d: allowed %v, want %v", i, allowed[i], want[i])
		}
	}
	if decisions[5].Limit != 30 || decisions[5].Remaining != 28 {
		t.Errorf("paid key: %+v", decisions[5])
	}
	if err := lim.CheckBatch(Batch{Keys: []uint64{3}, Tiers: []uint32{1}}, allowed[:1], nil); err != nil || !allowed[0] {
		t.Errorf("now: %v %v", allowed[0], err)
	}
	allowed[0], allowed[1] = false, false
	err = lim.CheckBatch(Batch{Keys: []uint64{9, 9}, Tiers: []uint32{1, 2}, At: tiersT0}, allowed[:2], nil)
	if !errors.Is(err, ErrInvalidTier) {
		t.Errorf("tier 2: %v", err)
	}
	if d, _ := lim.Check(Request{Key: Uint64Key(9), Peek: true, At: tiersT0, Tier: 1}); d.Remaining != 30 {
		t.Errorf("a refused batch stored something: %+v", d)
	}
	if err := lim.CheckBatch(Batch{Keys: []uint64{9, 9}, Tiers: []uint32{1}}, allowed[:2], nil); !errors.Is(err, ErrInvalidLength) {
		t.Errorf("short tiers: %v", err)
	}

	// A minute: far beyond the three admissions at once (a busy machine
	// may be slow to run them), and below the fourth's 20 minutes, so
	// that one gives up at once.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < 3; i++ {
		if d, err := lim.Acquire(ctx, Request{Key: Uint64Key(7)}); err != nil || d.Limit != 3 {
			t.Fatalf("acquire %d: %+v %v", i, d, err)
		}
	}
	if _, err := lim.Acquire(ctx, Request{Key: Uint64Key(7)}); !errors.Is(err, ErrTimedOut) {
		t.Errorf("a fourth free acquire: %v", err)
	}
	if d, err := lim.Acquire(ctx, Request{Key: BytesKey([]byte("p")), Tier: 1}); err != nil || d.Limit != 30 {
		t.Errorf("paid bytes: %+v %v", d, err)
	}
	if _, err := lim.Acquire(ctx, Request{Key: Uint64Key(7), Tier: 2}); !errors.Is(err, ErrInvalidTier) {
		t.Errorf("tier 2: %v", err)
	}
}

// A tiered limiter's snapshot keeps its tiers: restored with them, or
// from the file alone; other tiers are refused.
func TestTiersSnapshotKeepsTheTiers(t *testing.T) {
	free := Config{Algorithm: FixedWindow, Limit: 3, Period: time.Minute, Capacity: 100}
	paid := free
	paid.Limit = 30
	lim, err := newTiered([]Config{free, paid})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	if _, err := lim.Check(Request{Key: Uint64Key(1), Cost: 10, At: tiersT0, Tier: 1}); err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/tiers.snap"
	if err := lim.SaveAt(path, tiersT0); err != nil {
		t.Fatal(err)
	}
	back, err := NewWith(Options{Tiers: [][]Config{{free}, {paid}}, States: StatesSnapshot, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if d, _ := back.Check(Request{Key: Uint64Key(1), Peek: true, At: tiersT0, Tier: 1}); d.Remaining != 20 {
		t.Errorf("restored paid key: %+v", d)
	}
	fromFile, err := NewWith(Options{States: StatesSnapshot, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer fromFile.Close()
	if fromFile.Tiers() != 2 {
		t.Errorf("the file's own: %d tiers", fromFile.Tiers())
	}
	other := paid
	other.Limit = 40
	if _, err := NewWith(Options{Tiers: [][]Config{{free}, {other}}, States: StatesSnapshot, Path: path}); !errors.Is(err, ErrSnapshotConfigMismatch) {
		t.Errorf("another paid limit: %v", err)
	}
	if _, err := NewWith(Options{Limits: []Limit{{Config: free}}, States: StatesSnapshot, Path: path}); !errors.Is(err, ErrSnapshotConfigMismatch) {
		t.Errorf("no tiers: %v", err)
	}
	if _, err := NewWith(Options{Limits: []Limit{}, Tiers: [][]Config{{}}, States: StatesSnapshot, Path: path}); !errors.Is(err, ErrInvalidLength) {
		t.Errorf("a tier of no limits: %v", err)
	}
}

// waitForFile waits for the file at path to appear (a periodic save
// renaming it into place), for at most 30 s.
func waitForFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no periodic save of %s", path)
		}
		time.Sleep(time.Millisecond)
	}
}

// A tiered limiter saved every millisecond: the file as its saving thread
// (not its Close) left it, as a process killed then would leave it,
// reopens into a limiter deciding the rest of a trace as the original.
// Other tiers, or none, are refused by name.
func TestPersistedTieredComesBackAndRefusesOtherTiers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tiers.snap")
	tiers := [][]Config{
		{{Algorithm: GCRA, Limit: 5, Period: time.Hour, Capacity: 100}, {Algorithm: TokenBucket, Limit: 8, Period: time.Hour, Capacity: 100}},
		{{Algorithm: GCRA, Limit: 50, Period: time.Hour, Capacity: 100}, {Algorithm: TokenBucket, Limit: 80, Period: time.Hour, Capacity: 100}},
	}
	request := func(i int) (key uint64, tier int, cost uint64) {
		key = uint64(i * 7 % 5)
		tier = int(key % 2)
		if i%4 == 0 {
			tier = i / 4 % 2
		}
		return key, tier, 1 + uint64(i%4)
	}
	p, err := NewWith(Options{Tiers: tiers, States: StatesPersisted, Path: path, SaveEvery: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Tiers() != 2 {
		t.Fatalf("tiers %d", p.Tiers())
	}
	// The first half before the limiter's clock (by which the saver judges
	// which states are live), the rest after every save.
	now, _ := p.Now()
	start := now - 10*uint64(time.Second)
	for i := 0; i < 60; i++ {
		key, tier, cost := request(i)
		if _, err := p.CheckEach(Request{Key: Uint64Key(key), Cost: cost, Peek: cost == 0, At: start + uint64(i)*uint64(100*time.Millisecond), Tier: tier}); err != nil {
			t.Fatal(err)
		}
	}
	// A save may have been under way during the checks; the one after the
	// first to rename began after them (the thread saves one at a time).
	os.Remove(path)
	waitForFile(t, path)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitForFile(t, path)
	saved, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "copy.snap")
	if err := os.WriteFile(copyPath, saved, 0o600); err != nil {
		t.Fatal(err)
	}
	back, err := NewWith(Options{Tiers: tiers, States: StatesPersisted, Path: copyPath, SaveEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	now, _ = p.Now()
	rest := now + uint64(time.Second)
	denied := 0
	for i := 60; i < 120; i++ {
		key, tier, cost := request(i)
		at := rest + uint64(i-60)*uint64(100*time.Millisecond)
		want, err := p.CheckEach(Request{Key: Uint64Key(key), Cost: cost, Peek: cost == 0, At: at, Tier: tier})
		if err != nil {
			t.Fatal(err)
		}
		got, err := back.CheckEach(Request{Key: Uint64Key(key), Cost: cost, Peek: cost == 0, At: at, Tier: tier})
		if err != nil {
			t.Fatal(err)
		}
		same := got.Decision == want.Decision && got.DeniedBy == want.DeniedBy && len(got.Limits) == len(want.Limits)
		for j := range got.Limits {
			same = same && j < len(want.Limits) && got.Limits[j] == want.Limits[j]
		}
		if !same {
			t.Fatalf("request %d (key %d tier %d cost %d): reopened %+v, original %+v", i, key, tier, cost, got, want)
		}
		if !want.Decision.Allowed {
			denied++
		}
	}
	if denied == 0 {
		t.Fatal("the trace never reached a limit: it tests nothing restored")
	}
	if err := back.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	// Another number of tiers, another tier's limit, no tiers at all.
	if _, err := NewWith(Options{Tiers: tiers[:1], States: StatesPersisted, Path: path, SaveEvery: time.Hour}); !errors.Is(err, ErrSnapshotConfigMismatch) {
		t.Errorf("one tier: %v", err)
	}
	other := [][]Config{tiers[0], {tiers[1][0], tiers[1][1]}}
	other[1][1].Limit = 81
	if _, err := NewWith(Options{Tiers: other, States: StatesPersisted, Path: path, SaveEvery: time.Hour}); !errors.Is(err, ErrSnapshotConfigMismatch) {
		t.Errorf("another limit: %v", err)
	}
	if _, err := NewWith(Options{Limits: []Limit{{Config: tiers[0][0]}}, States: StatesPersisted, Path: path, SaveEvery: time.Hour}); !errors.Is(err, ErrSnapshotConfigMismatch) {
		t.Errorf("untiered open of a tiered file: %v", err)
	}
	plain := filepath.Join(dir, "plain.snap")
	untiered, err := NewWith(Options{Limits: []Limit{{Config: tiers[0][0]}}, States: StatesPersisted, Path: plain, SaveEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := untiered.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewWith(Options{Tiers: [][]Config{{tiers[0][0]}, {tiers[1][0]}}, States: StatesPersisted, Path: plain, SaveEvery: time.Hour}); !errors.Is(err, ErrSnapshotConfigMismatch) {
		t.Errorf("tiered open of an untiered file: %v", err)
	}
	// No tiers given: the file's own.
	own, err := NewWith(Options{States: StatesPersisted, Path: path, SaveEvery: time.Hour})
	if err != nil || own.Tiers() != 2 {
		t.Errorf("the file's tiers: %d %v", own.Tiers(), err)
	}
	own.Close()
	if _, err := NewWith(Options{States: StatesPersisted, Path: filepath.Join(dir, "none.snap"), SaveEvery: time.Hour}); !errors.Is(err, ErrInvalidLength) {
		t.Errorf("no file, no limits: %v", err)
	}
	// One limit per tier, fresh: the tiers are there.
	single, err := NewWith(Options{Tiers: [][]Config{{tiers[0][0]}, {tiers[1][0]}}, States: StatesPersisted, Path: filepath.Join(dir, "single.snap"), SaveEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := single.Check(Request{Key: Uint64Key(1), At: tiersT0, Tier: 1}); err != nil || d.Limit != 50 {
		t.Errorf("tier 1 of a fresh file: %+v %v", d, err)
	}
	if err := single.Close(); err != nil {
		t.Fatal(err)
	}
}

// A tier check allocates nothing: its decision stays on the Go stack (the
// tier functions are declared noescape in the cgo preamble).
func TestTierChecksDoNotAllocate(t *testing.T) {
	cfg := func(limit uint64) Config {
		return Config{Algorithm: FixedWindow, Limit: limit, Period: time.Minute, Capacity: 64}
	}
	lim, err := newTiered([]Config{cfg(10), cfg(100)})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	key := []byte("k")
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := lim.Check(Request{Key: Uint64Key(7), At: tiersT0, Tier: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := lim.Check(Request{Key: BytesKey(key), At: tiersT0, Tier: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := lim.Check(Request{Key: Uint64Key(7)}); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("a tier check allocated %.1f times per run", allocs)
	}
}

// newTiered is a limiter of one limit per tier, tiers[t] being tier t's.
func newTiered(tiers []Config) (*Limiter, error) {
	rows := make([][]Config, len(tiers))
	for i := range tiers {
		rows[i] = tiers[i : i+1]
	}
	return NewWith(Options{Tiers: rows})
}
