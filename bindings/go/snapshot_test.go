package ratecell_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratecell/ratecell-go"
)

func TestSnapshotSaveAndRestore(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "limits.snap")
	const t0 = uint64(1_700_000_000_000_000_000)
	for _, a := range []ratecell.Algorithm{ratecell.GCRA, ratecell.TokenBucket, ratecell.SlidingLog, ratecell.BucketedWindow} {
		cfg := ratecell.Config{Algorithm: a, Limit: 3, Period: time.Second, Capacity: 100}
		lim, err := ratecell.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for key := uint64(0); key < 5; key++ {
			if _, err := lim.Check(ratecell.Request{Key: ratecell.Uint64Key(key), Cost: key % 4, Peek: key%4 == 0, At: t0}); err != nil {
				t.Fatal(err)
			}
		}
		if err := lim.SaveAt(path, t0); err != nil {
			t.Fatal(err)
		}
		back, err := ratecell.NewWith(ratecell.Options{Limits: []ratecell.Limit{{Config: cfg}}, States: ratecell.StatesSnapshot, Path: path})
		if err != nil {
			t.Fatal(err)
		}
		any, err := ratecell.NewWith(ratecell.Options{States: ratecell.StatesSnapshot, Path: path})
		if err != nil {
			t.Fatal(err)
		}
		for key := uint64(0); key < 5; key++ {
			want, _ := lim.Check(ratecell.Request{Key: ratecell.Uint64Key(key), At: t0 + 1})
			got, _ := back.Check(ratecell.Request{Key: ratecell.Uint64Key(key), At: t0 + 1})
			got2, _ := any.Check(ratecell.Request{Key: ratecell.Uint64Key(key), At: t0 + 1})
			if got != want || got2 != want {
				t.Errorf("%v key %d: restored %+v / %+v, original %+v", a, key, got, got2, want)
			}
		}
		other := cfg
		other.Limit = 4
		if _, err := ratecell.NewWith(ratecell.Options{Limits: []ratecell.Limit{{Config: other}}, States: ratecell.StatesSnapshot, Path: path}); !errors.Is(err, ratecell.ErrSnapshotConfigMismatch) {
			t.Errorf("%v: a different limit gave %v", a, err)
		}
		lim.Close()
		back.Close()
		any.Close()
	}
	if _, err := ratecell.NewWith(ratecell.Options{States: ratecell.StatesSnapshot, Path: filepath.Join(dir, "missing.snap")}); !errors.Is(err, ratecell.ErrSnapshotNotFound) {
		t.Errorf("missing file: %v", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.snap")
	for _, damaged := range [][]byte{nil, data[:len(data)/2], append(append([]byte{}, data[:40]...), append([]byte{data[40] ^ 1}, data[41:]...)...)} {
		if err := os.WriteFile(bad, damaged, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ratecell.NewWith(ratecell.Options{States: ratecell.StatesSnapshot, Path: bad}); !errors.Is(err, ratecell.ErrSnapshotDamaged) {
			t.Errorf("damaged file of %d bytes: %v", len(damaged), err)
		}
	}
	closed, _ := ratecell.New(ratecell.Config{Algorithm: ratecell.GCRA, Limit: 1, Period: time.Second})
	closed.Close()
	if err := closed.Save(path); !errors.Is(err, ratecell.ErrClosed) {
		t.Errorf("Save after Close: %v", err)
	}
}
