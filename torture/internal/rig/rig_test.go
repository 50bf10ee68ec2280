package rig

import (
	"fmt"
	"testing"
)

// fatalTB records Fatalf instead of ending the test.
type fatalTB struct {
	testing.TB
	fatal string
}

func (f *fatalTB) Helper()                        {}
func (f *fatalTB) Logf(string, ...any)            {}
func (f *fatalTB) Fatalf(format string, a ...any) { f.fatal = fmt.Sprintf(format, a...) }

func TestNewRandReplaysASeed(t *testing.T) {
	t.Setenv("TIDEMARK_TORTURE_SEED", "12345")
	a, b := NewRand(t), NewRand(t)
	for range 10 {
		if x, y := a.Uint64(), b.Uint64(); x != y {
			t.Fatalf("two sources of seed 12345 differ: %d and %d", x, y)
		}
	}
}

func TestNewRandRefusesABadSeed(t *testing.T) {
	t.Setenv("TIDEMARK_TORTURE_SEED", "0x1f")
	f := &fatalTB{TB: t}
	NewRand(f)
	if f.fatal == "" {
		t.Fatal("TIDEMARK_TORTURE_SEED=0x1f was accepted: the run would not replay the seed asked for")
	}
}
