package framework_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// fileSetCfg is a server with one feed over dir/*.log and a group whose
// store is in data, counting every line once.
func fileSetCfg(dir, data string) framework.Config {
	return framework.Config{
		Feeds: []framework.FeedConfig{{
			Name:     "logs",
			File:     &framework.FileConfig{Paths: []string{filepath.Join(dir, "*.log")}, PointerDir: filepath.Join(dir, "ptr")},
			Overload: framework.OverloadConfig{Policy: framework.Pause},
			Idle:     framework.Backoff{Max: 5e6},
		}},
		Groups: []framework.GroupConfig{{Name: "g", Processors: []string{"c"}, Store: "bbolt:" + data}},
		Logger: discard(),
	}
}

// TestFileSetFeedWithStore: a feed over a set of files, a group with a
// store. Every line of every file is applied once; the store keeps one
// record per file, naming it; a restart applies nothing again; a store
// emptied of the records (deleted) makes every file read again from its
// start (the store is the truth, per file), and applies every line once.
func TestFileSetFeedWithStore(t *testing.T) {
	dir, data := t.TempDir(), t.TempDir()
	total := 0
	for i := range 4 {
		p := filepath.Join(dir, fmt.Sprintf("f%d.log", i))
		writeLines(t, p, 1, 50*(i+1))
		total += 50 * (i + 1)
	}
	run := func(data string, want int64) {
		t.Helper()
		c := &counter{feed: "logs"}
		s := startServer(t, fileSetCfg(dir, data), framework.Processors{"c": c})
		waitFor(t, "every line handled", func() bool { return c.handled.Load() >= want })
		settle(t, s, "logs")
		st := status(t, s, "logs")
		require.Len(t, st.Files, 4)
		stopServer(t, s)
		require.Equal(t, want, c.handled.Load(), "lines handled in this run")
	}
	run(data, int64(total))
	n, _, _ := readCount(t, data, "", "logs")
	require.Equal(t, int64(total), n)
	st, err := state.OpenDir(data, &state.Options{Logger: discard()})
	require.NoError(t, err)
	all := st.AppliedAll("logs")
	require.NoError(t, st.Close())
	require.Len(t, all, 4)
	for i, l := range all {
		require.Equal(t, filepath.Join(dir, fmt.Sprintf("f%d.log", i)), l.File)
		require.Equal(t, fileLinePos(50*(i+1)), l.Position)
	}

	// Restarted: nothing again.
	run(data, 0)

	// A new store: every file read again from its start, once.
	fresh := t.TempDir()
	run(fresh, int64(total))
	n, _, _ = readCount(t, fresh, "", "logs")
	require.Equal(t, int64(total), n)

	// An append to one file: only its new lines.
	writeLines(t, filepath.Join(dir, "f2.log"), 151, 160)
	run(fresh, 10)
	require.NoDirExists(t, filepath.Join(dir, "f0.log"+".readPointer"))
	_, err = os.Stat(filepath.Join(dir, "ptr", "logs.registry"))
	require.NoError(t, err)
}

// TestFileSetRenamedFileAppliedOnce: a file of the set renamed to another
// name the set's glob matches (logrotate's dateext, or app.log to
// app.1.log under *.log), with a new file at the old name, while the
// server runs and while it is stopped: the store applies every line once
// (the renamed file is read on under its new name, in its epoch, and the
// store recognises the lines it applied under the old one).
func TestFileSetRenamedFileAppliedOnce(t *testing.T) {
	for _, running := range []bool{false, true} {
		t.Run(fmt.Sprintf("running=%v", running), func(t *testing.T) {
			dir, data := t.TempDir(), t.TempDir()
			app := filepath.Join(dir, "app.log")
			writeLines(t, app, 1, 100)
			c := &counter{feed: "logs"}
			s := startServer(t, fileSetCfg(dir, data), framework.Processors{"c": c})
			waitFor(t, "the first lines handled", func() bool { return c.handled.Load() >= 100 })
			settle(t, s, "logs")
			if !running {
				stopServer(t, s)
			}
			// dateext, then numbered: each rotation with a new file at app.log.
			require.NoError(t, os.Rename(app, filepath.Join(dir, "app-20261201.log")))
			writeLines(t, filepath.Join(dir, "app-20261201.log"), 101, 110) // a late write
			writeLines(t, app, 111, 150)
			if running {
				waitFor(t, "the lines after the rotation handled", func() bool { return c.handled.Load() >= 150 })
				settle(t, s, "logs")
				stopServer(t, s)
			}
			c = &counter{feed: "logs"}
			s = startServer(t, fileSetCfg(dir, data), framework.Processors{"c": c})
			settle(t, s, "logs")
			stopServer(t, s)
			n, _, _ := readCount(t, data, "", "logs")
			require.Equal(t, int64(150), n, "lines applied")

			require.NoError(t, os.Rename(app, filepath.Join(dir, "app.1.log")))
			writeLines(t, app, 151, 160)
			c = &counter{feed: "logs"}
			s = startServer(t, fileSetCfg(dir, data), framework.Processors{"c": c})
			waitFor(t, "the lines of the new file handled", func() bool { return c.handled.Load() >= 10 })
			settle(t, s, "logs")
			stopServer(t, s)
			n, _, _ = readCount(t, data, "", "logs")
			require.Equal(t, int64(160), n, "lines applied")
		})
	}
}
