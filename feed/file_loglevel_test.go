package feed

import (
	"log/slog"
	"os"
	"testing"
)

// TestRotationLogLevels: a rotation the source follows loses nothing, so
// it is logged at INFO, with its kind; a warning is left for what an
// operator must look at (here: a file rewritten in place).
func TestRotationLogLevels(t *testing.T) {
	a, b := genLines("a", 0, 20), genLines("b", 0, 10)
	for _, tc := range []struct {
		name   string
		cfg    Config
		rotate func(t *testing.T, p string)
		kinds  []string // kinds of the INFO records, in order
		warn   string   // the one warning expected, "" for none
	}{
		{name: "rename", rotate: func(t *testing.T, p string) {
			rename(t, p, p+".1")
			write(t, p, b)
		}, kinds: []string{rotationRename}},
		{name: "delete and create", rotate: func(t *testing.T, p string) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			write(t, p, b)
		}, kinds: []string{rotationReplace}},
		{name: "copy and rename", rotate: func(t *testing.T, p string) {
			write(t, p+".tmp", a+b)
			rename(t, p+".tmp", p)
		}, kinds: []string{rotationCopyRename}},
		{name: "truncate", rotate: func(t *testing.T, p string) {
			if err := os.Truncate(p, 0); err != nil {
				t.Fatal(err)
			}
			appendTo(t, p, b[:32])
		}, kinds: []string{rotationTruncate}},
		{name: "copytruncate", cfg: rotatedConfig(), rotate: func(t *testing.T, p string) {
			appendTo(t, p, genLines("a", 20, 5)) // not read yet: in the copy only
			copyTruncate(t, p, p+".1")
			appendTo(t, p, b)
		}, kinds: []string{rotationCopyTruncate, rotationRename}},
		{name: "rotated twice, the middle one compressed", cfg: rotatedConfig(), rotate: func(t *testing.T, p string) {
			rotateNumbered(t, p)
			write(t, p, genLines("m", 0, 5))
			rotateNumbered(t, p)
			compress(t, p+".1")
			write(t, p, b)
		}, kinds: []string{rotationCompressed, rotationRename, rotationRename}},
		{name: "rewritten in place", rotate: func(t *testing.T, p string) {
			write(t, p, genLines("z", 0, 30))
		}, warn: "rewritten in place"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := input(t, a)
			s := open(t, p, tc.cfg)
			if g := s.collect(); len(g) != 20 {
				t.Fatalf("%d lines before the rotation", len(g))
			}
			tc.rotate(t, p)
			s.collect()
			var kinds []string
			for _, r := range s.log.find(slog.LevelInfo, "") {
				if k, ok := attrs(r)["kind"]; ok {
					kinds = append(kinds, k.String())
				}
			}
			if len(kinds) != len(tc.kinds) {
				t.Fatalf("kinds %q, want %q; log:\n%s", kinds, tc.kinds, s.log)
			}
			for i := range kinds {
				if kinds[i] != tc.kinds[i] {
					t.Fatalf("kinds %q, want %q; log:\n%s", kinds, tc.kinds, s.log)
				}
			}
			warns := s.log.find(slog.LevelWarn, "")
			switch {
			case tc.warn == "" && len(warns) != 0:
				t.Fatalf("a rotation the source follows warned; log:\n%s", s.log)
			case tc.warn != "" && (len(warns) != 1 || len(s.log.find(slog.LevelWarn, tc.warn)) != 1):
				t.Fatalf("want one warning %q; log:\n%s", tc.warn, s.log)
			}
		})
	}
}
