package framework_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// The child modes of TestKill9FileSetRotation: a server over dir/*.log
// whose group applies each line to a bbolt store in dir/data (one counter
// per line), then appends it to dir/progress (the parent's measure of
// progress, not a record). "fileset-kill" runs until killed;
// "fileset-finish" runs until the feed settles, then stops cleanly.
const (
	childFileSetKill   = "fileset-kill"
	childFileSetFinish = "fileset-finish"
)

// lineApplier applies every line to the store: lines/<line> += 1.
type lineApplier struct {
	st       state.Namespace
	progress *os.File
}

func (p *lineApplier) Start(_ context.Context, fc *framework.Context) error {
	st, err := fc.Store()
	if err != nil {
		return err
	}
	p.st = st.Namespace("")
	return fc.Subscribe("logs")
}

func (p *lineApplier) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	if _, err := p.st.Apply(ctx, d, func(tx *state.Tx) error {
		_, err := tx.Bucket("lines").AddInt64(line, 1)
		return err
	}); err != nil {
		return err
	}
	_, err := p.progress.Write(append(line, '\n'))
	return err
}

func runFileSetChild(mode string) int {
	dir := os.Getenv("TIDEMARK_DIR")
	progress, err := os.OpenFile(filepath.Join(dir, "progress"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer progress.Close()
	logf, err := os.OpenFile(filepath.Join(dir, "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer logf.Close()
	cfg := fileSetCfg(filepath.Join(dir, "logs"), filepath.Join(dir, "data"))
	cfg.Logger = slog.New(slog.NewTextHandler(logf, nil))
	fmt.Fprintf(logf, "run %d\n", os.Getpid())
	cfg.Feeds[0].QueueCapacity = 64
	cfg.Feeds[0].BatchSize = 16
	s, err := framework.New(cfg, framework.Processors{"c": &lineApplier{progress: progress}})
	if err == nil {
		err = s.Start(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if mode == childFileSetKill {
		time.Sleep(2 * time.Minute) // the parent kills us long before
		return 3
	}
	return settleAndStop(s, "logs")
}

// TestKill9FileSetRotation: a server following logs/*.log, whose files are
// rotated within the set (logrotate's numbered scheme: app.1.log to
// app.2.log, ..., app.log to app.1.log, a new app.log; and late writes to
// the file just renamed) while it runs, killed with SIGKILL at moments
// chosen by its progress (lines being read, a rotation just made) and
// started again. At the end every line written was applied exactly once:
// none lost, none applied a second time under a file's new name.
func TestKill9FileSetRotation(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	require.NoError(t, os.Mkdir(logs, 0o755))
	app := filepath.Join(logs, "app.log")
	next := 1
	write := func(path string, n int) {
		writeLines(t, path, next, next+n-1)
		next += n
	}
	progress := func() int {
		b, _ := os.ReadFile(filepath.Join(dir, "progress"))
		return bytes.Count(b, []byte{'\n'})
	}
	var cmd *exec.Cmd
	start := func() {
		cmd = exec.Command(os.Args[0], "-test.run=^TestKill9FileSetRotation$")
		cmd.Env = append(os.Environ(), childEnv+"="+childFileSetKill, "TIDEMARK_DIR="+dir)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
	}
	kill := func() {
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("child did not die of SIGKILL: %v", err)
		}
	}
	rotate := func(kept int) {
		for k := kept; k >= 1; k-- {
			from := filepath.Join(logs, fmt.Sprintf("app.%d.log", k))
			if _, err := os.Stat(from); err == nil {
				require.NoError(t, os.Rename(from, filepath.Join(logs, fmt.Sprintf("app.%d.log", k+1))))
			}
		}
		require.NoError(t, os.Rename(app, filepath.Join(logs, "app.1.log")))
	}

	write(app, 2000)
	start()
	kills := 0
	for round := range 8 {
		// Kill while the lines are being applied: after a part of them.
		base := progress()
		waitFor(t, "the child applying lines", func() bool { return progress() >= min(base+100+round*37, next-1) })
		rotate(round)
		write(filepath.Join(logs, "app.1.log"), 50) // a late write to the renamed file
		write(app, 1500)
		if round%2 == 0 {
			// Kill at once after the rotation: the registry or the store
			// may have moved the file's record, or neither.
			kill()
			kills++
			start()
			continue
		}
		base = progress()
		waitFor(t, "the child applying lines after the rotation", func() bool { return progress() >= base+50 })
		kill()
		kills++
		start()
	}
	kill()
	cmd = exec.Command(os.Args[0], "-test.run=^TestKill9FileSetRotation$")
	cmd.Env = append(os.Environ(), childEnv+"="+childFileSetFinish, "TIDEMARK_DIR="+dir)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Run(), "the last run")

	st, err := state.OpenDir(filepath.Join(dir, "data"), &state.Options{Logger: discard()})
	require.NoError(t, err)
	defer st.Close()
	counts := map[string]int64{}
	require.NoError(t, st.View(func(tx *state.Tx) error {
		return tx.Bucket("lines").ForEach(func(k, v []byte) error {
			counts[string(k)] = int64(beUint64(v))
			return nil
		})
	}))
	var lost, twice []string
	for i := 1; i < next; i++ {
		l := fmt.Sprintf("%06d,entry", i)
		switch counts[l] {
		case 1:
		case 0:
			lost = append(lost, l)
		default:
			twice = append(twice, fmt.Sprintf("%s x%d", l, counts[l]))
		}
	}
	t.Logf("%d lines, %d kills, %d lines handled in all runs", next-1, kills+1, progress())
	if len(lost) > 0 || len(twice) > 0 {
		b, _ := os.ReadFile(filepath.Join(dir, "log"))
		t.Logf("the children's log:\n%s", b)
	}
	require.Empty(t, lost, "lines never applied")
	require.Empty(t, twice, "lines applied more than once")
	require.Len(t, counts, next-1)
}
