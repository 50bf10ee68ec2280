package feed

import (
	"os"
	"strings"
	"testing"
)

// This file holds the two defects of issue 16 as tests, each with its
// variants: a rotation while stopped that the pointer's short fingerprint
// could not tell from the new file (defect 1), and a truncation, refill and
// rename between two polls that delivered fragments of the rewritten file
// and then stalled (defect 2).

// collect polls until the source is caught up with no partial line and a
// poll delivers nothing, committing every batch as a framework does, and
// returns the lines. It fails the test on a deadline, naming the status.
func (ts *tsrc) collect() []got {
	ts.t.Helper()
	var all []got
	for range 10000 {
		g, err := ts.poll()
		if err != nil {
			ts.t.Fatalf("poll: %v", err)
		}
		if len(g) > 0 {
			all = append(all, g...)
			last := g[len(g)-1]
			if err := ts.Commit(last.Epoch, last.Position); err != nil {
				ts.t.Fatal(err)
			}
			continue
		}
		if st := ts.Status(); st.State == StateCaughtUp && !st.PartialPending {
			return all
		}
	}
	ts.t.Fatalf("the source never caught up: status %+v; lines so far %v\nlog:\n%s", ts.Status(), lines(all), ts.log)
	return nil
}

// wantSeq checks that gs are exactly the lines want, in order.
func wantSeq(t *testing.T, what string, gs []got, want ...string) {
	t.Helper()
	if got := lines(gs); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("%s: delivered %q, want %q", what, got, want)
	}
}

// epochsOf returns the distinct epochs of gs, in order of first use.
func epochsOf(gs []got) []uint64 {
	var out []uint64
	for _, g := range gs {
		if len(out) == 0 || out[len(out)-1] != g.Epoch {
			out = append(out, g.Epoch)
		}
	}
	return out
}

// TestDefect1RotationWhileStoppedOverShortFingerprint: the epoch started on
// a file whose pointer covers only a common head (nothing, or a header
// line), the source stopped, the file appended to, rotated by rename and a
// new file made at the path. The new file matches the pointer's short
// fingerprint; the restart must still find the renamed file by its identity
// and deliver its lines first, then every line of the new file.
func TestDefect1RotationWhileStoppedOverShortFingerprint(t *testing.T) {
	for _, tc := range []struct {
		name    string
		first   string // the file at the first run
		read    int    // lines read and committed in the first run
		appends string // appended while stopped, before the rotation
		fresh   string // the new file at the path
		want    []string
		group   bool
	}{
		{name: "empty file (logrotate create)", first: "", appends: "a\nb\nc\n", fresh: "d\n", want: []string{"a", "b", "c", "d"}},
		{name: "empty file, group commit", first: "", appends: "a\nb\nc\n", fresh: "d\n", want: []string{"a", "b", "c", "d"}, group: true},
		{name: "header line only", first: "h\n", read: 1, appends: "a\nb\n", fresh: "h\nd\n", want: []string{"h", "a", "b", "h", "d"}},
		{name: "header line, nothing appended", first: "h\n", read: 1, appends: "", fresh: "h\nd\n", want: []string{"h", "h", "d"}},
		{name: "header delivered, not committed", first: "h\n", read: 0, appends: "a\n", fresh: "h\nd\n", want: []string{"h", "h", "a", "h", "d"}},
		{name: "empty file, new file empty too", first: "", appends: "a\n", fresh: "", want: []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := input(t, tc.first)
			if tc.first == "" {
				write(t, p, "")
			}
			s := open(t, p, Config{GroupCommit: tc.group})
			var first []got
			if tc.read > 0 {
				first = s.takeCommit(tc.read)
			} else if g, err := s.poll(); err != nil || len(g) != 0 && tc.first == "" {
				t.Fatalf("first poll: %v %v", g, err)
			} else {
				first = g
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			appendTo(t, p, tc.appends)
			rename(t, p, p+".1")
			write(t, p, tc.fresh)

			s = open(t, p, Config{GroupCommit: tc.group})
			all := append(first, s.collect()...)
			wantSeq(t, "both runs", all, tc.want...)
		})
	}
}

// TestDefect1PathMissingAtRestart: the same rotation, but the new file is
// made only after the restart: the renamed file is finished while the
// source waits for the path, then the new file is read.
func TestDefect1PathMissingAtRestart(t *testing.T) {
	p := input(t, "")
	write(t, p, "")
	s := open(t, p, Config{})
	if g, err := s.poll(); err != nil || len(g) != 0 {
		t.Fatalf("first poll: %v %v", g, err)
	}
	s.Close()
	appendTo(t, p, "a\nb\nc\n")
	rename(t, p, p+".1")

	s = open(t, p, Config{})
	g := s.takeCommit(3)
	wantSeq(t, "renamed file", g, "a", "b", "c")
	write(t, p, "d\n")
	wantSeq(t, "new file", s.takeCommit(1), "d")
}

// TestDefect2TruncateRefillRenameBetweenPolls: the file being read is
// truncated, filled again and renamed away, and a new file made at the
// path, all between two polls (a feed paused by a full queue does not
// poll for as long as the queue stays full). The source must not deliver
// fragments of the rewritten file read from the old offset, must deliver
// the rewritten lines (they are in the renamed file it holds open) and the
// new file's lines, and must not stall.
func TestDefect2TruncateRefillRenameBetweenPolls(t *testing.T) {
	const old = "old-1\nold-2\nold-3\n"
	for _, tc := range []struct {
		name      string
		refill    string // written into the truncated file
		inPlace   bool   // overwrite in place (no truncation) instead
		committed bool   // the old lines were committed before the rewrite
		group     bool
		want      []string
	}{
		{name: "committed, refill longer", refill: "rewritten-1\nrewritten-2\nrewritten-3\n", committed: true,
			want: []string{"rewritten-1", "rewritten-2", "rewritten-3", "fresh"}},
		{name: "committed, refill shorter", refill: "r\n", committed: true, want: []string{"r", "fresh"}},
		{name: "committed, refill empty", refill: "", committed: true, want: []string{"fresh"}},
		{name: "not committed (consumer paused)", refill: "rewritten-1\nrewritten-2\nrewritten-3\n",
			want: []string{"rewritten-1", "rewritten-2", "rewritten-3", "fresh"}},
		{name: "committed, group commit", refill: "rewritten-1\nrewritten-2\nrewritten-3\n", committed: true, group: true,
			want: []string{"rewritten-1", "rewritten-2", "rewritten-3", "fresh"}},
		{name: "not committed, group commit", refill: "rewritten-1\nrewritten-2\nrewritten-3\n", group: true,
			want: []string{"rewritten-1", "rewritten-2", "rewritten-3", "fresh"}},
		{name: "overwritten in place, same length", refill: "new-1\nnew-2\nnew-3\n", inPlace: true, committed: true,
			want: []string{"new-1", "new-2", "new-3", "fresh"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := input(t, old)
			s := open(t, p, Config{GroupCommit: tc.group})
			g := s.waitLines(3)
			wantSeq(t, "old file", g, "old-1", "old-2", "old-3")
			if tc.committed {
				if err := s.Commit(g[2].Epoch, g[2].Position); err != nil {
					t.Fatal(err)
				}
			}
			// One poll at the end of the file: the source has seen its end.
			if h, err := s.poll(); err != nil || len(h) != 0 {
				t.Fatalf("poll at the end: %v %v", h, err)
			}
			if tc.inPlace {
				f, err := os.OpenFile(p, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt([]byte(tc.refill), 0); err != nil {
					t.Fatal(err)
				}
				f.Close()
			} else {
				if err := os.Truncate(p, 0); err != nil {
					t.Fatal(err)
				}
				appendTo(t, p, tc.refill)
			}
			rename(t, p, p+".1")
			write(t, p, "fresh\n")

			rest := s.collect()
			wantSeq(t, "after the rewrite", rest, tc.want...)
			for _, r := range rest {
				if r.Epoch == g[0].Epoch {
					t.Fatalf("line %+v of the rewritten file delivered in the old epoch %d", r, g[0].Epoch)
				}
			}
			if es := epochsOf(rest); len(es) != min(2, len(rest)) && tc.refill != "" {
				t.Fatalf("epochs %v: want one for the rewritten file and one for the new file", es)
			}
			// A late commit of the old lines changes nothing.
			if err := s.Commit(g[2].Epoch, g[2].Position); err != nil {
				t.Fatal(err)
			}
			if st := s.Status(); st.State != StateCaughtUp {
				t.Fatalf("status %+v", st)
			}
			// And the restart reads nothing again but what a restart may:
			// every line was committed.
			s.Close()
			s = open(t, p, Config{GroupCommit: tc.group})
			if again := s.collect(); len(again) != 0 {
				t.Fatalf("restart delivered %q again", lines(again))
			}
		})
	}
}

// TestDefect1RotationWhileRunningOverShortFingerprint: the running case of
// defect 1. A file that holds only a header line (or nothing) is rotated by
// rename while the source tails it, and the new file starts with the same
// header: the source must read the new file from 0 under a new epoch, its
// header included, not take it for a copy of the old one and skip it.
func TestDefect1RotationWhileRunningOverShortFingerprint(t *testing.T) {
	for _, tc := range []struct {
		name, first, fresh string
		want               []string
	}{
		{"header only", "h\n", "h\nd\n", []string{"h", "h", "d"}},
		{"empty file", "", "d\n", []string{"d"}},
		{"header and a line, new file longer", "h\na\n", "h\na\nb\n", []string{"h", "a", "h", "a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := input(t, tc.first)
			write(t, p, tc.first)
			s := open(t, p, Config{})
			g := s.collect()
			rename(t, p, p+".1")
			write(t, p, tc.fresh)
			g = append(g, s.collect()...)
			wantSeq(t, "both files", g, tc.want...)
			if es := epochsOf(g); len(tc.first) > 0 && len(es) != 2 {
				t.Fatalf("epochs %v, want two", es)
			}
		})
	}
}

// TestDefect2RewrittenWhilePausedMidFile: the variant of defect 2 without a
// rename. The consumer pauses the feed in the middle of a file longer than
// the read buffer (its queue full: no poll for as long as it stays full);
// meanwhile the file is truncated and filled again, past the offset read.
// The lines already read into the buffer are old lines, read before the
// rewrite, and are delivered; but the next read must not go on from the
// old offset (new lines at old positions, in the old epoch): the file is
// read again from 0 under a new epoch.
func TestDefect2RewrittenWhilePausedMidFile(t *testing.T) {
	old := genLines("old", 0, 4000)   // 128,000 bytes: twice the read buffer
	fresh := genLines("new", 0, 3000) // 96,000 bytes: past the offset read
	for _, group := range []bool{false, true} {
		p := input(t, old)
		s := open(t, p, Config{GroupCommit: group})
		g, err := s.poll() // one batch of 64 lines: the source is mid-file
		if err != nil || len(g) != len(s.items) {
			t.Fatalf("first poll: %d lines, %v", len(g), err)
		}
		if err := s.Commit(g[len(g)-1].Epoch, g[len(g)-1].Position); err != nil {
			t.Fatal(err)
		}
		rewriteInPlace(t, p, fresh)
		rest := s.collect()
		i := 0
		for i < len(rest) && rest[i].Epoch == g[0].Epoch {
			i++
		}
		if i > 0 {
			// Old lines from the buffer: the ones after the first batch.
			wantLines(t, "old lines read before the rewrite", rest[:i], old[:rest[i-1].Position], g[len(g)-1].Position)
		}
		if i == len(rest) {
			t.Fatal("the rewritten file was not read")
		}
		wantLines(t, "after the rewrite", rest[i:], fresh, 0)
	}
}
