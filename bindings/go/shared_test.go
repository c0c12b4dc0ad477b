package ratecell

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"
)

// Two limiters opened on one path share one limit (as two processes
// would), and a region that does not fit gives a named error.
func TestSharedRegion(t *testing.T) {
	path := fmt.Sprintf("/dev/shm/ratecell-go-test-%d", os.Getpid())
	defer os.Remove(path)
	cfg := Config{Algorithm: GCRA, Limit: 5, Period: time.Hour, Capacity: 100}
	shared := func(cfg Config, path string) (*Limiter, error) {
		return NewWith(Options{Limits: []Limit{{Config: cfg}}, States: StatesShared, Shared: path})
	}
	a, err := shared(cfg, path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := NewWith(Options{Limits: []Limit{{Config: cfg}}, States: StatesShared, Shared: path, SharedMode: 0o640})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const t0 = 1_700_000_000_000_000_000
	admitted := 0
	for i := 0; i < 10; i++ {
		l := a
		if i%2 == 1 {
			l = b
		}
		d, err := l.Check(Request{Key: Uint64Key(7), At: t0})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("two handles on one region admitted %d of a limit of 5", admitted)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("a new region has mode 0600: %v %v", info.Mode(), err)
	}
	other := cfg
	other.Limit = 6
	if _, err := shared(other, path); !errors.Is(err, ErrSharedConfigMismatch) {
		t.Fatalf("another configuration: %v", err)
	}
	log := cfg
	log.Algorithm = SlidingLog
	if _, err := shared(log, path+"-log"); !errors.Is(err, ErrSharedUnsupported) {
		t.Fatalf("sliding log in shared mode: %v", err)
	}
	tiered := Options{Tiers: [][]Config{{cfg}, {cfg}}, States: StatesShared, Shared: path + "-tiers"}
	if _, err := NewWith(tiered); !errors.Is(err, ErrSharedUnsupported) {
		t.Fatalf("tiers in shared mode: %v", err)
	}
}
