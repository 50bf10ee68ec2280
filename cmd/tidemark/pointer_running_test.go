package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// feedEnv makes the test binary a server that follows the input in the
// variable's value, counting each line in the store beside it (see
// runFeed), instead of running the tests.
const feedEnv = "TIDEMARK_CLI_FEED"

// lineCounter counts each line it is given in its group's store.
type lineCounter struct{ st state.Store }

func (c *lineCounter) Start(_ context.Context, fc *framework.Context) error {
	st, err := fc.Store()
	if err != nil {
		return err
	}
	c.st = st
	return fc.Subscribe("orders")
}

func (c *lineCounter) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	_, err := c.st.Apply(ctx, d, func(tx *state.Tx) error {
		_, err := tx.Bucket("counts").AddInt64(line, 1)
		return err
	})
	return err
}

// runFeed is the child: a server that follows input, its group's store in
// input+".state", until SIGTERM; it prints "running" once started.
func runFeed(input string) {
	srv, err := framework.New(framework.Config{
		Feeds:  []framework.FeedConfig{{Name: "orders", File: &framework.FileConfig{Filename: input}, Overload: framework.OverloadConfig{Policy: framework.Pause}}},
		Groups: []framework.GroupConfig{{Name: "g", Processors: []string{"c"}, Store: "bbolt:" + input + ".state"}},
	}, framework.Processors{"c": &lineCounter{}})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	ctx, stop := srv.SignalContext(context.Background())
	defer stop()
	fmt.Println("running")
	if err := srv.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// appendOrders appends lines from..to to path and returns its new size.
func appendOrders(t *testing.T, path string, from, to int) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "order-%05d\n", i)
	}
	_, err = f.WriteString(b.String())
	require.NoError(t, err)
	fi, err := f.Stat()
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return fi.Size()
}

// waitCommitted waits until a slot of the pointer file at ptr holds
// position pos: the running feed committed up to it. It reads the file's
// bytes, as a feed holds it.
func waitCommitted(t *testing.T, ptr string, pos int64, exited <-chan struct{}) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		data, _ := os.ReadFile(ptr)
		for off := 0; off < len(data) && off <= pointer.SlotSize; off += pointer.SlotSize {
			if p, err := pointer.Decode(data[off:]); err == nil && p.Position == pos {
				return
			}
		}
		select {
		case <-exited:
			t.Fatalf("the feed exited before it committed position %d", pos)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the feed never committed position %d", pos)
		}
	}
}

// `tidemark pointer set in.csv.readPointer --position 0` while a feed runs
// (a real server in another process, reading and committing) used to
// report success, and the feed overwrote the pointer at its next commit.
// It is refused now, saying a feed is running and which process; the
// feed goes on committing where it was, and at the end every line is
// counted once and the pointer is at the end.
func TestPointerSetWhileAFeedRuns(t *testing.T) {
	input := filepath.Join(t.TempDir(), "in.csv")
	ptr := input + pointer.Suffix
	size := appendOrders(t, input, 1, 1000)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), feedEnv+"="+input)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	var waitErr error
	sc := bufio.NewScanner(out)
	require.True(t, sc.Scan(), "the feed printed nothing")
	require.Equal(t, "running", sc.Text())
	go func() { waitErr = cmd.Wait(); close(exited) }()
	timer := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() }) // a safety net only
	defer timer.Stop()

	waitCommitted(t, ptr, size, exited)
	wantRefused(t, tm("pointer", "set", ptr, "--position", "0"), cmd.Process.Pid)

	// The feed reads and commits on, from where it was.
	size = appendOrders(t, input, 1001, 2000)
	waitCommitted(t, ptr, size, exited)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	<-exited
	require.NoError(t, waitErr, "the feed's clean stop")

	pf := pointer.Open(ptr, pointer.Options{})
	res, err := pf.Load()
	require.NoError(t, err)
	require.NoError(t, pf.Close())
	require.Equal(t, size, res.Record.Position)
	st, err := state.OpenDir(input+".state", nil)
	require.NoError(t, err)
	defer st.Close()
	require.NoError(t, st.View(func(tx *state.Tx) error {
		for i := 1; i <= 2000; i++ {
			n, err := tx.Bucket("counts").GetInt64(fmt.Appendf(nil, "order-%05d", i))
			if err != nil || n != 1 {
				return fmt.Errorf("order-%05d counted %d times (%v)", i, n, err)
			}
		}
		return nil
	}))
}
