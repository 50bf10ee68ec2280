package torture

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// TestFileSetModel is the model-based test of file sets (issue 16): a
// writer drives random sequences of appends (whole and partial lines) to
// the files of a glob, new files, deletions of files the consumer has
// delivered, renames of files to other names of the glob (with or without
// a new file at the old name), pauses of the consumer (SIGSTOP) while the
// writer goes on (and renames), clean stops and kill -9 of the consumer, a
// real child process that follows the glob as one file set (its registry
// in the folder) and writes every line before committing it. It checks what TestRotationModel
// checks: every line written delivered, none never written, and within a
// run the lines of each file in order and once.
func TestFileSetModel(t *testing.T) {
	track(t)
	rng := newRand(t)
	for i := range pick(2, 500) {
		seed := rng.Uint64()
		ok := t.Run(fmt.Sprintf("seq%d", i), func(t *testing.T) {
			t.Logf("sequence seed %d", seed)
			runSetModel(t, rand.New(rand.NewPCG(seed, 17)), pick(30, 60))
		})
		if !ok {
			return
		}
	}
}

func runSetModel(t *testing.T, rng *rand.Rand, ops int) {
	dir := tempDir(t)
	m := &model{t: t, rng: rng, dir: dir, path: filepath.Join(dir, "*.log"), out: filepath.Join(dir, "out.txt"), set: true,
		names: map[string]*generation{}, line: map[string]*generation{}}
	m.logs.w = io.Discard
	files := map[string]*generation{} // the files of the set now
	create := func() {
		g := m.newGen()
		name := filepath.Join(dir, fmt.Sprintf("f%03d.log", g.id))
		if err := os.WriteFile(name, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		files[name] = g
		fmt.Fprintf(&m.logs, "writer: created %s (gen %d)\n", filepath.Base(name), g.id)
	}
	pickFile := func() (string, *generation) {
		names := slices.Sorted(func(yield func(string) bool) {
			for n := range files {
				if !yield(n) {
					return
				}
			}
		})
		if len(names) == 0 {
			return "", nil
		}
		n := names[rng.IntN(len(names))]
		return n, files[n]
	}
	appendTo := func() {
		if len(files) == 0 {
			create()
		}
		name, g := pickFile()
		m.writeLines(name, g, 1+rng.IntN(200))
	}
	partial := func() {
		name, g := pickFile()
		if g == nil || g.partial != "" {
			return
		}
		l := m.lineText(g)
		g.partial = l[:1+rng.IntN(len(l)-1)]
		appendFile(t, name, []byte(g.partial))
	}
	// rename renames a file to another name the glob matches (logrotate's
	// dateext under *.log), sometimes with a new file at the old name: the
	// set reads it on under its new name, so no line of it comes twice in
	// a run.
	renames := 0
	rename := func() {
		name, g := pickFile()
		if g == nil {
			return
		}
		renames++
		to := filepath.Join(dir, fmt.Sprintf("f%03d-%d.log", g.id, renames))
		if err := os.Rename(name, to); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&m.logs, "writer: renamed %s (gen %d, %d lines) to %s\n", filepath.Base(name), g.id, len(g.lines), filepath.Base(to))
		delete(files, name)
		files[to] = g
		if rng.IntN(2) == 0 {
			ng := m.newGen()
			if err := os.WriteFile(name, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			files[name] = ng
			fmt.Fprintf(&m.logs, "writer: new file %s (gen %d) at the old name\n", filepath.Base(name), ng.id)
		}
	}
	for range 1 + rng.IntN(3) {
		create()
		appendTo()
	}
	m.start()
	defer m.stop(syscall.SIGKILL)
	for range ops {
		switch r := rng.IntN(100); {
		case r < 36:
			appendTo()
		case r < 44:
			partial()
		case r < 54:
			create()
		case r < 62:
			rename()
		case r < 68:
			// A file every line of which was delivered (a partial line
			// ended first) is removed: the set reads it to its end and
			// forgets it.
			name, g := pickFile()
			if g == nil || m.child == nil {
				continue
			}
			if g.partial != "" {
				m.writeLines(name, g, 1)
			}
			if !m.waitDelivered(slices.Clone(g.lines)) {
				m.stuck("to deliver the lines of a file to delete")
			}
			if err := os.Remove(name); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&m.logs, "writer: removed %s (gen %d)\n", filepath.Base(name), g.id)
			delete(files, name)
		case r < 76:
			if m.child == nil {
				continue
			}
			m.child.Process.Signal(syscall.SIGSTOP)
			fmt.Fprintf(&m.logs, "writer: SIGSTOP\n")
			for range 1 + rng.IntN(4) {
				switch rng.IntN(4) {
				case 0:
					create()
				case 1:
					rename()
				}
				appendTo()
			}
			m.child.Process.Signal(syscall.SIGCONT)
			fmt.Fprintf(&m.logs, "writer: SIGCONT\n")
		case r < 82:
			fmt.Fprintf(&m.logs, "writer: SIGTERM\n")
			m.stop(syscall.SIGTERM)
			m.start()
		default:
			fmt.Fprintf(&m.logs, "writer: kill\n")
			m.killByProgress()
		}
	}
	for name, g := range files {
		if g.partial != "" {
			m.writeLines(name, g, 1)
		}
	}
	m.finish()
}
