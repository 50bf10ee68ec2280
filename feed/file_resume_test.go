package feed

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/pointer"
)

// lineageOf is the record a store keeps after applying path's lines up to
// pos in epoch: the file's fingerprint (its first min(4096, size) bytes)
// and the hash of the up to 64 bytes before pos.
func lineageOf(t *testing.T, path string, epoch uint64, pos int64) tidemark.Lineage {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fp := data[:min(len(data), pointer.MaxFingerprintLen)]
	n := int(min(pos, pointer.MaxTailLen))
	return tidemark.Lineage{
		Applied:     tidemark.Applied{Epoch: epoch, Position: pos},
		Fingerprint: tidemark.Fingerprint{Len: len(fp), Hash: pointer.HashBytes(fp)},
		TailLen:     n,
		TailHash:    pointer.HashBytes(data[pos-int64(n) : pos]),
	}
}

// inEpoch is a found point of epoch at pos without lineage: in the
// pointer's epoch, the position alone counts.
func inEpoch(holder string, epoch uint64, pos int64) ResumePoint {
	return ResumePoint{Holder: holder, Found: true, Lineage: tidemark.Lineage{Applied: tidemark.Applied{Epoch: epoch, Position: pos}}}
}

// TestResumeFromDecision is the table of the floor: a Committed source
// stopped with its pointer at line 100 (of 300 lines of 32 bytes) in epoch
// E, then started again with resume points, starts at the lowest position
// the points cover, never above the pointer, keeping the pointer file
// where it was.
func TestResumeFromDecision(t *testing.T) {
	const total, at = 300, 100
	content := genLines("a", 0, total)
	const P = at * 32
	otherEpoch := uint64(7) // an epoch the pointer never had
	cases := []struct {
		name string
		// change alters the input or the pointer file after the first run;
		// nil changes nothing.
		change func(t *testing.T, p string)
		points func(t *testing.T, p string, e uint64) []ResumePoint
		// start is where the second run starts; newEpoch whether it
		// starts a new epoch; rewind whether it counts a rewind.
		start    int64
		newEpoch bool
		rewind   bool
		reason   string
		holder   string // of the lowest point; "" means g1
	}{
		{name: "same epoch behind", points: func(t *testing.T, p string, e uint64) []ResumePoint {
			return []ResumePoint{inEpoch("g1", e, 40*32)}
		}, start: 40 * 32, rewind: true, reason: "behind the pointer in the pointer's epoch"},
		{name: "same epoch ahead", points: func(t *testing.T, p string, e uint64) []ResumePoint {
			return []ResumePoint{inEpoch("g1", e, 150*32)}
		}, start: P},
		{name: "same epoch equal", points: func(t *testing.T, p string, e uint64) []ResumePoint {
			return []ResumePoint{inEpoch("g1", e, P)}
		}, start: P},
		{name: "same epoch inside a line", points: func(t *testing.T, p string, e uint64) []ResumePoint {
			return []ResumePoint{inEpoch("g1", e, 40*32+5)}
		}, start: 0, rewind: true, reason: "not a line start"},
		{name: "not found", points: func(t *testing.T, p string, e uint64) []ResumePoint {
			return []ResumePoint{{Holder: "g1"}}
		}, start: 0, rewind: true, reason: "no record of the feed"},
		{name: "found at 0", points: func(t *testing.T, p string, e uint64) []ResumePoint {
			return []ResumePoint{inEpoch("g1", e, 0)}
		}, start: 0, rewind: true, reason: "applied nothing"},
		{name: "other epoch matching", points: func(t *testing.T, p string, e uint64) []ResumePoint {
			return []ResumePoint{{Holder: "g1", Found: true, Lineage: lineageOf(t, p, otherEpoch, 30*32)}}
		}, start: 30 * 32, rewind: true, reason: "holds the bytes it was applied from"},
		{name: "other epoch matching ahead", points: func(t *testing.T, p string, e uint64) []ResumePoint {
			return []ResumePoint{{Holder: "g1", Found: true, Lineage: lineageOf(t, p, otherEpoch, 200*32)}}
		}, start: P},
		{name: "other epoch not matching (tail)", points: func(t *testing.T, p string, e uint64) []ResumePoint {
			l := lineageOf(t, p, otherEpoch, 30*32)
			l.TailHash++
			return []ResumePoint{{Holder: "g1", Found: true, Lineage: l}}
		}, start: 0, rewind: true, reason: "bytes before position 960 differ"},
		{name: "other epoch not matching (fingerprint)", points: func(t *testing.T, p string, e uint64) []ResumePoint {
			l := lineageOf(t, p, otherEpoch, 30*32)
			l.Fingerprint.Hash++
			return []ResumePoint{{Holder: "g1", Found: true, Lineage: l}}
		}, start: 0, rewind: true, reason: "first 4096 bytes differ"},
		{name: "other epoch with a shorter fingerprint", points: func(t *testing.T, p string, e uint64) []ResumePoint {
			// Applied when the file was 100 bytes long: its fingerprint
			// covers those 100 bytes, and is compared on them.
			l := lineageOf(t, p, otherEpoch, 30*32)
			l.Fingerprint = tidemark.Fingerprint{Len: 100, Hash: pointer.HashBytes([]byte(content[:100]))}
			return []ResumePoint{{Holder: "g1", Found: true, Lineage: l}}
		}, start: 30 * 32, rewind: true, reason: "holds the bytes"},
		{name: "other epoch without a tail hash", points: func(t *testing.T, p string, e uint64) []ResumePoint {
			l := lineageOf(t, p, otherEpoch, 30*32)
			l.TailLen, l.TailHash = 0, 0
			return []ResumePoint{{Holder: "g1", Found: true, Lineage: l}}
		}, start: 0, rewind: true, reason: "no usable tail hash"},
		{name: "other epoch past the end", points: func(t *testing.T, p string, e uint64) []ResumePoint {
			l := lineageOf(t, p, otherEpoch, 30*32)
			l.Position = 400 * 32
			return []ResumePoint{{Holder: "g1", Found: true, Lineage: l}, inEpoch("g2", e, 60*32)}
		}, start: 60 * 32, rewind: true, reason: "behind the pointer", holder: "g2"},
		{name: "several points: the lowest", points: func(t *testing.T, p string, e uint64) []ResumePoint {
			return []ResumePoint{
				inEpoch("g1", e, 70*32),
				{Holder: "g2", Found: true, Lineage: lineageOf(t, p, otherEpoch, 20*32)},
				inEpoch("g3", e, 250*32),
				inEpoch("g4", e, 50*32),
			}
		}, start: 20 * 32, rewind: true, reason: "g2 (epoch 7, position 640)", holder: "g2"},
		{name: "no points", points: func(t *testing.T, p string, e uint64) []ResumePoint { return nil }, start: P},
		{name: "pointer missing", change: func(t *testing.T, p string) {
			if err := os.Remove(p + pointer.Suffix); err != nil {
				t.Fatal(err)
			}
		}, points: func(t *testing.T, p string, e uint64) []ResumePoint {
			return []ResumePoint{inEpoch("g1", e, 40*32)}
		}, start: 0, newEpoch: true},
		{name: "file replaced", change: func(t *testing.T, p string) {
			write(t, p, genLines("b", 0, total))
		}, points: func(t *testing.T, p string, e uint64) []ResumePoint {
			return []ResumePoint{inEpoch("g1", e, 40*32), {Holder: "g2"}}
		}, start: 0, newEpoch: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := input(t, content)
			e := stopAfter(t, p, at)
			if tc.change != nil {
				tc.change(t, p)
			}
			s := open(t, p, Config{})
			if err := s.ResumeFrom(tc.points(t, p, e)); err != nil {
				t.Fatal(err)
			}
			g := s.drain()
			cur := content
			if tc.name == "file replaced" {
				cur = genLines("b", 0, total)
			}
			got := wantLines(t, "second run", g, cur, tc.start)
			st := s.Status()
			if tc.newEpoch != (got != e) {
				t.Fatalf("epoch %d, pointer's %d: want new %v", got, e, tc.newEpoch)
			}
			if tc.rewind != (st.Rewinds == 1) || st.Rewinds > 1 {
				t.Fatalf("rewinds %d (%q), want a rewind: %v", st.Rewinds, st.LastRewind, tc.rewind)
			}
			w := s.log.find(slog.LevelWarn, "a store is behind the pointer")
			if len(w) != int(st.Rewinds) {
				t.Fatalf("%d rewind warnings for %d rewinds:\n%s", len(w), st.Rewinds, s.log)
			}
			if !tc.rewind {
				return
			}
			if !strings.Contains(st.LastRewind, tc.reason) {
				t.Fatalf("LastRewind %q does not say %q", st.LastRewind, tc.reason)
			}
			holder := "g1"
			if tc.holder != "" {
				holder = tc.holder
			}
			a := attrs(w[0])
			if a["path"].String() != p || a["pointer"].String() != p+pointer.Suffix || a["epoch"].Uint64() != e ||
				a["pointer_position"].Int64() != P || a["start"].Int64() != tc.start || a["holder"].String() != holder ||
				a["reason"].String() == "" || !strings.Contains(st.LastRewind, a["reason"].String()) || !strings.HasPrefix(st.LastRewind, holder+" ") {
				t.Fatalf("warning %v, LastRewind %q", a, st.LastRewind)
			}
			// The pointer file was not moved back, and the source says so.
			if res := loadPointer(t, p); res.Record.Epoch != e || res.Record.Position != P {
				t.Fatalf("pointer %+v, want epoch %d position %d", res.Record, e, P)
			}
			if st.CommittedPosition != P || st.Epoch != e {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

// TestResumeFromEndToEnd: a file read and committed to its end, then
// started again with a store behind the pointer: exactly the lines after
// the store's position are delivered, the pointer file never moves back
// while they are committed, and once the reading passes the pointer, new
// lines move it forward as usual. With and without group commit.
func TestResumeFromEndToEnd(t *testing.T) {
	for _, group := range []bool{false, true} {
		t.Run(map[bool]string{false: "sync", true: "group"}[group], func(t *testing.T) {
			content := genLines("a", 0, 500)
			p := input(t, content)
			e := stopAfter(t, p, 500)
			const P = 500 * 32
			if res := loadPointer(t, p); res.Record.Position != P {
				t.Fatalf("pointer %+v", res.Record)
			}
			s := open(t, p, Config{GroupCommit: group})
			const X = 123 * 32
			if err := s.ResumeFrom([]ResumePoint{inEpoch("group ledger, store bbolt:data", e, X), inEpoch("group audit", e, 400*32)}); err != nil {
				t.Fatal(err)
			}
			var all []got
			s.batches(func(g []got) {
				all = append(all, g...)
				last := g[len(g)-1]
				if err := s.Flush(); err != nil {
					t.Fatal(err)
				}
				res := loadPointer(t, p)
				if res.Record.Epoch != e || res.Record.Position != P {
					t.Fatalf("after the commit of %d: pointer %+v, want it at %d until the reading passes it", last.Position, res.Record, P)
				}
				if st := s.Status(); st.CommittedPosition != P || st.AskedPosition != P {
					t.Fatalf("status %+v", st)
				}
			})
			wantLines(t, "resumed", all, content, X)
			if all[0].Epoch != e {
				t.Fatalf("epoch %d, want the pointer's %d", all[0].Epoch, e)
			}
			// New lines, past the pointer: committed as usual.
			more := genLines("b", 0, 10)
			appendTo(t, p, more)
			g := s.takeCommit(10)
			wantLines(t, "appended", g, content+more, P)
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			if res := loadPointer(t, p); res.Record.Epoch != e || res.Record.Position != P+10*32 {
				t.Fatalf("pointer %+v", res.Record)
			}
			if st := s.Status(); st.Rewinds != 1 || st.CommittedPosition != P+10*32 {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

// TestResumeFromRenamedAway: the pointer names a file renamed away while
// the source was stopped, read to its end (the pointer at its end), and a
// store is behind the pointer: the renamed file is read again from the
// store's position in the pointer's epoch, and the source moves to the
// new file only once the lines it delivered are committed, although those
// commits are at or below the pointer and do not move it.
func TestResumeFromRenamedAway(t *testing.T) {
	a, b := genLines("a", 0, 200), genLines("b", 0, 20)
	p := input(t, a)
	e := stopAfter(t, p, 200)
	rename(t, p, p+".1")
	write(t, p, b)
	s := open(t, p, Config{})
	if err := s.ResumeFrom([]ResumePoint{inEpoch("g1", e, 150*32)}); err != nil {
		t.Fatal(err)
	}
	g := s.waitLines(50)
	if wantLines(t, "renamed file", g, a, 150*32) != e {
		t.Fatalf("epoch %d, want %d", g[0].Epoch, e)
	}
	for range 3 {
		if h, err := s.poll(); len(h) != 0 || err != nil {
			t.Fatalf("moved on before the renamed file's lines were committed: %+v %v", h, err)
		}
	}
	if st := s.Status(); st.State != StateBehind || !strings.Contains(st.Detail, "to be committed") || st.Rewinds != 1 {
		t.Fatalf("status %+v", st)
	}
	if err := s.Commit(e, g[len(g)-1].Position); err != nil {
		t.Fatal(err)
	}
	if e2 := wantLines(t, "new file", s.takeCommit(20), b, 0); e2 <= e {
		t.Fatalf("new file in epoch %d", e2)
	}
}

// TestResumeFromRenamedAwayPathMissing: the same with no file at the path
// at the start.
func TestResumeFromRenamedAwayPathMissing(t *testing.T) {
	a := genLines("a", 0, 200)
	p := input(t, a)
	e := stopAfter(t, p, 200)
	rename(t, p, p+".1")
	s := open(t, p, Config{})
	if err := s.ResumeFrom([]ResumePoint{{Holder: "g1", Found: true, Lineage: lineageOf(t, p+".1", 3, 180*32)}}); err != nil {
		t.Fatal(err)
	}
	if wantLines(t, "renamed file", s.waitLines(20), a, 180*32) != e {
		t.Fatal("not the pointer's epoch")
	}
	if st := s.Status(); st.Rewinds != 1 {
		t.Fatalf("status %+v", st)
	}
}

// TestResumeFromLegacy: a legacy pointer's migration follows the floor: a
// store whose lineage the input holds, below the legacy count, starts the
// new epoch at its position, stored at once.
func TestResumeFromLegacy(t *testing.T) {
	content := genLines("a", 0, 100)
	p := input(t, content)
	writeLegacy(t, p, 60*32+7) // inside line 61
	s := open(t, p, Config{})
	if err := s.ResumeFrom([]ResumePoint{{Holder: "g1", Found: true, Lineage: lineageOf(t, p, 5, 50*32)}}); err != nil {
		t.Fatal(err)
	}
	g := s.drain()
	e := wantLines(t, "migrated", g, content, 50*32)
	res := loadPointer(t, p)
	if !res.Found || res.Record.Epoch != e || res.Record.Position != 50*32 {
		t.Fatalf("pointer %+v, want the new epoch %d at 1600", res, e)
	}
	if st := s.Status(); st.Rewinds != 1 {
		t.Fatalf("status %+v", st)
	}
}

// TestResumeFromCalls: ResumeFrom is called once, before the first Poll;
// the other strategies accept it and ignore it.
func TestResumeFromCalls(t *testing.T) {
	p := input(t, "a\nb\n")
	s := open(t, p, Config{})
	if err := s.ResumeFrom(nil); err != nil {
		t.Fatal(err)
	}
	if err := s.ResumeFrom(nil); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("second call: %v", err)
	}
	s.drain()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.ResumeFrom(nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	s = open(t, p, Config{})
	s.drain()
	if err := s.ResumeFrom([]ResumePoint{{Holder: "g"}}); err == nil || !strings.Contains(err.Error(), "after its first Poll") || !strings.Contains(err.Error(), p) {
		t.Fatalf("after Poll: %v", err)
	}
	for _, strat := range []ReadStrategy{Earliest, Latest} {
		s := open(t, p, Config{Strategy: strat})
		if err := s.ResumeFrom([]ResumePoint{{Holder: "g"}}); err != nil {
			t.Fatalf("%v: %v", strat, err)
		}
		n := len(s.drain())
		if want := map[ReadStrategy]int{Earliest: 2, Latest: 0}[strat]; n != want || s.Status().Rewinds != 0 {
			t.Fatalf("%v: %d lines, status %+v", strat, n, s.Status())
		}
	}
}

const resumeChildEnv = "TIDEMARK_RESUME_CHILD"

// TestResumeFromKill kills, with SIGKILL, a process that resumes from a
// store behind its pointer, at moments chosen by its progress: while it
// reads below the pointer, and after it has passed it. Each start resumes
// from what the model store (the lines the child reported processed)
// holds, or from the pointer when the store is ahead of it. The pointer
// file never moves back from where the first run left it, stays in its
// epoch, and no line after the store's first position is ever skipped.
func TestResumeFromKill(t *testing.T) {
	if v := os.Getenv(resumeChildEnv); v != "" {
		var path string
		var e uint64
		var x int64
		if _, err := fmt.Sscanf(v, "%d %d %s", &e, &x, &path); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		killChild(Config{Path: path, Logger: slog.New(slog.DiscardHandler)}, false, inEpoch("model store", e, x))
		return
	}
	const total, at, from = 20000, 3000, 1000
	p := filepath.Join(t.TempDir(), "in.log")
	var b strings.Builder
	for i := 1; i <= total; i++ {
		b.WriteString(killLine(i))
	}
	write(t, p, b.String())
	e := stopAfter(t, p, at)
	const P = at * 12
	processed := make([]bool, total+1)
	x := int64(from * 12) // the model store: how far it has applied
	for round, commits := range []int{20, 150, 400} {
		// The start is the lower of the store and the pointer: a store
		// behind the pointer lowers it; one ahead of it (the child reports
		// a poll's lines processed before it commits them, and the kill
		// can fall between) leaves it at the pointer, and the lines
		// between are delivered again.
		before := loadPointer(t, p)
		if !before.Found || before.Record.Epoch != e {
			t.Fatalf("round %d: pointer %+v before the child, want epoch %d", round, before, e)
		}
		start := min(x, before.Record.Position)
		env := fmt.Sprintf("%d %d %s", e, x, p)
		ep, _, seen := runKillChild(t, env, "TestResumeFromKill", resumeChildEnv, "committed", commits)
		if ep != e {
			t.Fatalf("round %d: the child read in epoch %d, want %d", round, ep, e)
		}
		if len(seen) == 0 || seen[0] != start+12 {
			t.Fatalf("round %d: the child started at %v, want the line after %d (the store's %d, the pointer's %d)", round, seen[:min(1, len(seen))], start, x, before.Record.Position)
		}
		for _, pos := range seen {
			processed[pos/12] = true
			x = max(x, pos)
		}
		res := loadPointer(t, p)
		if !res.Found || res.Record.Epoch != e || res.Record.Position < P || res.Record.Position > max(P, x) {
			t.Fatalf("round %d: pointer %+v, want epoch %d, at or after %d and not past the store's %d", round, res.Record, e, P, x)
		}
	}
	if x <= P {
		t.Fatalf("the rounds never passed the pointer (store at %d): the test tests less than it says", x)
	}
	s := open(t, p, Config{})
	if err := s.ResumeFrom([]ResumePoint{inEpoch("model store", e, x)}); err != nil {
		t.Fatal(err)
	}
	for _, g := range s.drain() {
		processed[g.Position/12] = true
	}
	for i := from + 1; i <= total; i++ {
		if !processed[i] {
			t.Fatalf("line %d was never processed", i)
		}
	}
}

// TestResumeFromCopyRenamedOver: the input replaced by a copy with the same
// bytes (another identity) keeps the pointer's epoch; a store behind the
// pointer lowers the start, and before the copy's first line is handed out
// the pointer is stored again, at its position, naming the copy (D5): not
// moved back.
func TestResumeFromCopyRenamedOver(t *testing.T) {
	content := genLines("a", 0, 50)
	p := input(t, content)
	e := stopAfter(t, p, 40)
	replaceByRename(t, p, content)
	s := open(t, p, Config{})
	if err := s.ResumeFrom([]ResumePoint{inEpoch("g1", e, 10*32)}); err != nil {
		t.Fatal(err)
	}
	if wantLines(t, "copy", s.drain(), content, 10*32) != e {
		t.Fatal("not the pointer's epoch")
	}
	res := loadPointer(t, p)
	if res.Record.Epoch != e || res.Record.Position != 40*32 || res.Record.Identity != identityOf(t, p) {
		t.Fatalf("pointer %+v, want epoch %d at %d naming the copy %+v", res.Record, e, 40*32, identityOf(t, p))
	}
}

// TestResumeFromFingerprintExtended: a pointer written while the input was
// short (its fingerprint covers 64 bytes), a store behind it, the input
// grown since: re-reading from the store's position, the source extends
// the pointer's fingerprint before it delivers lines past what it covers,
// at the pointer's position, which does not move back.
func TestResumeFromFingerprintExtended(t *testing.T) {
	short := genLines("a", 0, 2)
	p := input(t, short)
	e := stopAfter(t, p, 2)
	if res := loadPointer(t, p); res.Record.Fingerprint.Len != 64 {
		t.Fatalf("pointer %+v: the test needs a short fingerprint", res.Record)
	}
	more := genLines("b", 0, 200)
	appendTo(t, p, more)
	s := open(t, p, Config{})
	if err := s.ResumeFrom([]ResumePoint{{Holder: "g1"}}); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "from 0", s.drain(), short+more, 0)
	res := loadPointer(t, p)
	if res.Record.Epoch != e || res.Record.Position != 64 || res.Record.Fingerprint.Len != pointer.MaxFingerprintLen ||
		res.Record.Fingerprint.Hash != pointer.HashBytes([]byte((short + more)[:pointer.MaxFingerprintLen])) {
		t.Fatalf("pointer %+v", res.Record)
	}
}
