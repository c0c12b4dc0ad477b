package ratecell_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratecell/ratecell-go"
)

// waitFor polls cond every 5 ms for at most limit (bounded: a failing
// condition ends the test instead of hanging it).
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPersistedSavesRestoresAndStopsOnClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits.snap")
	cfg := ratecell.Config{Algorithm: ratecell.GCRA, Limit: 3, Period: time.Hour, Capacity: 100}
	p, err := ratecell.NewWith(ratecell.Options{Limits: []ratecell.Limit{{Config: cfg}}, States: ratecell.StatesPersisted, Path: path, SaveEvery: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if d, _ := p.Check(ratecell.Request{Key: ratecell.Uint64Key(7)}); !d.Allowed {
			t.Fatalf("check %d denied", i)
		}
	}
	// The background saves happen without any call from here.
	waitFor(t, 10*time.Second, "a periodic save holding key 7", func() bool {
		back, err := ratecell.NewWith(ratecell.Options{Limits: []ratecell.Limit{{Config: cfg}}, States: ratecell.StatesSnapshot, Path: path})
		if err != nil {
			return false
		}
		defer back.Close()
		d, _ := back.Check(ratecell.Request{Key: ratecell.Uint64Key(7)})
		return !d.Allowed
	})
	if err := p.Save(path); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("a second close: %v", err)
	}
	if _, err := p.Check(ratecell.Request{Key: ratecell.Uint64Key(7)}); !errors.Is(err, ratecell.ErrClosed) {
		t.Fatalf("check after close: %v", err)
	}
	// Close stopped the saver: a removed file is not written again.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the file came back after Close: %v", err)
	}
	// Restored at start: key 7 stays spent across the restart.
	p, err = ratecell.NewWith(ratecell.Options{Limits: []ratecell.Limit{{Config: cfg}}, States: ratecell.StatesPersisted, Path: path, SaveEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := p.Check(ratecell.Request{Key: ratecell.Uint64Key(7)}); !d.Allowed {
		t.Fatal("a fresh file: key 7 is fresh")
	}
	p.Close()
	p, err = ratecell.NewWith(ratecell.Options{Limits: []ratecell.Limit{{Config: cfg}}, States: ratecell.StatesPersisted, Path: path, SaveEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := p.Check(ratecell.Request{Key: ratecell.Uint64Key(7)}); d.Remaining != 1 {
		t.Fatalf("restored: remaining %d, want 1", d.Remaining)
	}
	// Closing a copy closes the limiter, and stops the saver.
	lim := *p
	lim.Close()
	if err := p.Close(); err != nil {
		t.Fatalf("close after the copy's: %v", err)
	}
	other := cfg
	other.Limit = 4
	if _, err := ratecell.NewWith(ratecell.Options{Limits: []ratecell.Limit{{Config: other}}, States: ratecell.StatesPersisted, Path: path, SaveEvery: time.Hour}); !errors.Is(err, ratecell.ErrSnapshotConfigMismatch) {
		t.Fatalf("another limit: %v", err)
	}
	if err := os.WriteFile(path, []byte("not a snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ratecell.NewWith(ratecell.Options{Limits: []ratecell.Limit{{Config: cfg}}, States: ratecell.StatesPersisted, Path: path, SaveEvery: time.Hour}); !errors.Is(err, ratecell.ErrSnapshotDamaged) {
		t.Fatalf("a damaged file: %v", err)
	}
}

func TestPersistedAndSnapshotStatesOfSeveralLimits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "multi.snap")
	limits := []ratecell.Limit{
		{Config: ratecell.Config{Algorithm: ratecell.SlidingLog, Limit: 2, Period: time.Hour, Capacity: 10}, Name: "hourly"},
		{Config: ratecell.Config{Algorithm: ratecell.TokenBucket, Limit: 5, Period: time.Hour, Capacity: 10}, Name: "tokens"},
	}
	p, err := ratecell.NewWith(ratecell.Options{Limits: limits, States: ratecell.StatesPersisted, Path: path, SaveEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if d, _ := p.Check(ratecell.Request{Key: ratecell.Uint64Key(3)}); !d.Allowed {
			t.Fatal("denied early")
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	back, err := ratecell.NewWith(ratecell.Options{Limits: limits, States: ratecell.StatesSnapshot, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	d, err := back.CheckEach(ratecell.Request{Key: ratecell.Uint64Key(3)})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.DeniedBy != 0 || back.LimitName(d.DeniedBy) != "hourly" || d.Limits[1].Remaining != 3 {
		t.Fatalf("restored: %+v", d)
	}
	if _, err := ratecell.NewWith(ratecell.Options{Limits: limits[:1], States: ratecell.StatesSnapshot, Path: path}); !errors.Is(err, ratecell.ErrSnapshotConfigMismatch) {
		t.Fatalf("one limit of two: %v", err)
	}
	// No limits: the file's own, names none.
	own, err := ratecell.NewWith(ratecell.Options{States: ratecell.StatesSnapshot, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := own.CheckEach(ratecell.Request{Key: ratecell.Uint64Key(3)}); d.Allowed || len(d.Limits) != 2 || own.LimitName(0) != "" {
		t.Fatalf("the file's own limits: %+v", d)
	}
	own.Close()
	p, err = ratecell.NewWith(ratecell.Options{Limits: limits, States: ratecell.StatesPersisted, Path: path, SaveEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := p.CheckEach(ratecell.Request{Key: ratecell.Uint64Key(3)}); d.DeniedBy != 0 || p.LimitName(0) != "hourly" {
		t.Fatalf("reopened: %+v", d)
	}
	p.Close()
	// Limits and tiers together, whatever the states: refused by length.
	for _, states := range []ratecell.States{ratecell.StatesSnapshot, ratecell.StatesPersisted} {
		both := ratecell.Options{Limits: limits, Tiers: [][]ratecell.Config{{limits[0].Config}}, States: states, Path: path}
		if _, err := ratecell.NewWith(both); !errors.Is(err, ratecell.ErrInvalidLength) {
			t.Fatalf("limits and tiers: %v", err)
		}
	}
	// A field the states do not read: refused by name before anything is
	// made (a region beside a file, a period beside a snapshot, a path or
	// a period for fresh states, states out of range).
	region := "ratecell-go-never-made"
	for _, o := range []ratecell.Options{
		{Limits: limits[1:], States: ratecell.StatesSnapshot, Path: path, Shared: region},
		{Limits: limits[1:], States: ratecell.StatesPersisted, Path: path, SaveEvery: time.Hour, Shared: region},
		{Limits: limits[1:], States: ratecell.StatesSnapshot, Path: path, SaveEvery: time.Hour},
		{Limits: limits[1:], Path: path},
		{Limits: limits[1:], SaveEvery: time.Hour},
		{Limits: limits[1:], Shared: region},
		{Limits: limits[1:], States: ratecell.StatesShared + 1},
	} {
		if _, err := ratecell.NewWith(o); !errors.Is(err, ratecell.ErrInvalidStates) {
			t.Fatalf("%+v: %v", o, err)
		}
	}
	// The path the states need, missing.
	for _, states := range []ratecell.States{ratecell.StatesSnapshot, ratecell.StatesPersisted, ratecell.StatesShared} {
		if _, err := ratecell.NewWith(ratecell.Options{Limits: limits[1:], States: states}); !errors.Is(err, ratecell.ErrNullArgument) {
			t.Fatalf("states %d without a path: %v", states, err)
		}
	}
	if _, err := os.Stat(filepath.Join("/dev/shm", region)); !os.IsNotExist(err) {
		t.Fatalf("a region was made: %v", err)
	}
}

// TestHelperPersistedChild is the child process of the SIGKILL test: it
// saves every millisecond while checking, until it is killed.
func TestHelperPersistedChild(t *testing.T) {
	path := os.Getenv("RATECELL_PERSISTED_CHILD")
	if path == "" {
		t.Skip("run by TestKilledProcessLeavesASnapshotThatRestores")
	}
	p, err := ratecell.NewWith(ratecell.Options{Limits: []ratecell.Limit{{Config: killedConfig}}, States: ratecell.StatesPersisted, Path: path, SaveEvery: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Bounded: should the parent die without killing it, it ends anyway.
	deadline := time.Now().Add(60 * time.Second)
	for key := uint64(0); key%4096 != 0 || time.Now().Before(deadline); key++ {
		p.Check(ratecell.Request{Key: ratecell.Uint64Key(key % 20_000)})
	}
}

var killedConfig = ratecell.Config{Algorithm: ratecell.GCRA, Limit: 1000, Period: time.Hour, Capacity: 30_000}

func TestKilledProcessLeavesASnapshotThatRestores(t *testing.T) {
	path := filepath.Join(t.TempDir(), "killed.snap")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 3; round++ {
		child := exec.Command(exe, "-test.run=^TestHelperPersistedChild$")
		child.Env = append(os.Environ(), "RATECELL_PERSISTED_CHILD="+path)
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		killed := false
		t.Cleanup(func() {
			if !killed {
				child.Process.Kill()
				child.Wait()
			}
		})
		waitFor(t, 30*time.Second, "a save holding keys", func() bool {
			l, err := ratecell.NewWith(ratecell.Options{Limits: []ratecell.Limit{{Config: killedConfig}}, States: ratecell.StatesSnapshot, Path: path})
			if err != nil {
				return false
			}
			defer l.Close()
			s, _ := l.Stats()
			return s.KeysTracked > 0
		})
		time.Sleep(time.Duration(30+40*round) * time.Millisecond)
		if err := child.Process.Kill(); err != nil { // SIGKILL
			t.Fatal(err)
		}
		child.Wait()
		killed = true
		l, err := ratecell.NewWith(ratecell.Options{Limits: []ratecell.Limit{{Config: killedConfig}}, States: ratecell.StatesSnapshot, Path: path})
		if err != nil {
			t.Fatalf("round %d: the file left by the killed process: %v", round, err)
		}
		s, _ := l.Stats()
		l.Close()
		if s.KeysTracked == 0 {
			t.Fatalf("round %d: no keys restored", round)
		}
	}
}

// Close returns a persisted limiter's last save's error: here its
// directory is gone.
func TestCloseReturnsTheLastSavesError(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gone")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := ratecell.Config{Algorithm: ratecell.GCRA, Limit: 3, Period: time.Hour, Capacity: 10}
	p, err := ratecell.NewWith(ratecell.Options{Limits: []ratecell.Limit{{Config: cfg}}, States: ratecell.StatesPersisted, Path: filepath.Join(dir, "limits.snap"), SaveEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); !errors.Is(err, ratecell.ErrSnapshotIO) {
		t.Fatalf("close: %v, want ErrSnapshotIO", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("a second close: %v", err)
	}
}
