package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/tidemark-go/tidemark/feed/pointer"
)

// TestPointerSlots: the sampler reads both slots of a pointer file, each a
// pointer the feed committed, without going through the pointer file's
// writer; a missing or garbage file gives none.
func TestPointerSlots(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.csv"+pointer.Suffix)
	if ps := pointerSlots(path); len(ps) != 0 {
		t.Fatalf("missing file: %v", ps)
	}
	pf := pointer.Open(path, pointer.Options{})
	if _, err := pf.Load(); err != nil {
		t.Fatal(err)
	}
	for _, pos := range []int64{10, 25, 40} {
		if err := pf.Store(pointer.Record{Epoch: 7, Position: pos}); err != nil {
			t.Fatal(err)
		}
	}
	pf.Close()
	var got []int64
	for _, p := range pointerSlots(path) {
		if p.Epoch != 7 {
			t.Fatalf("epoch %d", p.Epoch)
		}
		got = append(got, p.Position)
	}
	slices.Sort(got)
	if !slices.Equal(got, []int64{25, 40}) {
		t.Fatalf("slots hold %v, want the last two commits [25 40]", got)
	}
	os.WriteFile(path, make([]byte, pointer.FileSize), 0o644)
	if ps := pointerSlots(path); len(ps) != 0 {
		t.Fatalf("NUL file: %v", ps)
	}
}

// TestRealAhead: a pointer past the durable position is a broken guarantee,
// unless every line in between was rejected (malformed lines are finished
// without being applied).
func TestRealAhead(t *testing.T) {
	input := filepath.Join(t.TempDir(), "in.csv")
	// Line ends: 6, 10 (malformed), 16, 20 (malformed).
	os.WriteFile(input, []byte("1,a,1\nbad\n2,b,2\nbad\n"), 0o644)
	cases := []struct {
		durable, pointer int64
		ahead            bool
	}{
		{6, 10, false},  // only a malformed line between
		{6, 16, true},   // line 2 passed
		{16, 20, false}, // malformed
		{0, 6, true},
	}
	for _, c := range cases {
		ev := "ahead epoch=1 pointer=" + itoa(c.pointer) + " durable=" + itoa(c.durable)
		got, err := realAhead(input, []string{ev})
		if err != nil || got != c.ahead {
			t.Errorf("%s: %v %v, want %v", ev, got, err, c.ahead)
		}
	}
	if n, _ := linesBetween(input, 0, 20); n != 4 {
		t.Errorf("linesBetween = %d", n)
	}
	if got, _ := realAhead(input, []string{"garbage"}); !got {
		t.Error("an unreadable ahead event must count as ahead")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
