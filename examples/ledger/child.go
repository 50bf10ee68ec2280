package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The events a `run --events` prints on stdout, one per line, for a harness
// (the demo, the tests) to follow its progress:
//
//	durable epoch=E position=P applied=A   a batch of state is durable: the
//	                                       durable state (one snapshot of
//	                                       it) holds A lines the ledger
//	                                       applied, in this run and before
//	                                       (rejected lines not counted), up
//	                                       to position P of epoch E
//	ahead epoch=E pointer=P durable=D      the pointer file was seen ahead of
//	                                       the durable state (a broken
//	                                       guarantee; never expected). A
//	                                       pointer the run found ahead of a
//	                                       store behind it is not reported:
//	                                       the feed reads from the store's
//	                                       position, and commits again once
//	                                       the reading passes the pointer
//	done lines=N applied=A skipped=S rejected=R saves=C
//	                                       the run ends cleanly: N lines were
//	                                       delivered in this run, A applied,
//	                                       S skipped as already applied, R
//	                                       rejected as malformed, in C durable
//	                                       saves (transactions)
const (
	evDurable = "durable"
	evAhead   = "ahead"
	evDone    = "done"
)

// event is one parsed event line.
type event struct {
	kind   string
	fields map[string]int64
}

func parseEvent(line string) (event, bool) {
	parts := strings.Fields(line)
	if len(parts) == 0 {
		return event{}, false
	}
	ev := event{kind: parts[0], fields: make(map[string]int64)}
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return event{}, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			u, uerr := strconv.ParseUint(v, 10, 64)
			if uerr != nil {
				return event{}, false
			}
			n = int64(u)
		}
		ev.fields[k] = n
	}
	switch ev.kind {
	case evDurable, evAhead, evDone:
		return ev, true
	}
	return event{}, false
}

// lockedWriter serialises writes of several goroutines to one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// child is a `run` in a child process, followed through its events. Its
// stderr and its events go to its log file.
type child struct {
	cmd     *exec.Cmd
	logFile *os.File

	mu      sync.Mutex
	durable event // the last durable event; kind "" before the first
	ahead   []string
	done    *event
	changed chan struct{} // closed and replaced on every event and at exit

	exited chan struct{}
	err    error // cmd.Wait's, once exited is closed
}

// startChild starts `exe run args...` with --events, its output in logPath.
func startChild(exe string, args []string, logPath string) (*child, error) {
	return startChildEnv(exe, args, logPath, nil)
}

// startChildEnv is startChild with extra environment variables.
func startChildEnv(exe string, args []string, logPath string, env []string) (*child, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "$ ledger run %s --events\n", strings.Join(args, " "))
	lw := &lockedWriter{w: logFile}
	cmd := exec.Command(exe, append(append([]string{"run"}, args...), "--events")...)
	cmd.Stderr = lw
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	c := &child{cmd: cmd, logFile: logFile, changed: make(chan struct{}), exited: make(chan struct{})}
	go c.follow(stdout, lw)
	return c, nil
}

func (c *child) follow(stdout io.Reader, log io.Writer) {
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(log, line)
		ev, ok := parseEvent(line)
		if !ok {
			continue
		}
		c.mu.Lock()
		switch ev.kind {
		case evDurable:
			c.durable = ev
		case evAhead:
			c.ahead = append(c.ahead, line)
		case evDone:
			c.done = &ev
		}
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
	}
	io.Copy(io.Discard, stdout)
	err := c.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		fmt.Fprintf(log, "# %s\n", ee.ProcessState)
	}
	c.logFile.Close()
	c.mu.Lock()
	c.err = err
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	close(c.exited)
}

// waitApplied waits until the child reports at least n durable applied
// lines, and reports whether it did; false when the child exited without
// reporting them or the timeout passed.
func (c *child) waitApplied(n int64, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		reached := c.durable.kind != "" && c.durable.fields["applied"] >= n
		changed := c.changed
		c.mu.Unlock()
		if reached {
			return true
		}
		select {
		case <-c.exited:
			// Every event was read before exited closed: look once more.
			c.mu.Lock()
			reached = c.durable.kind != "" && c.durable.fields["applied"] >= n
			c.mu.Unlock()
			return reached
		case <-deadline.C:
			return false
		case <-changed:
		}
	}
}

// kill sends SIGKILL and waits for the child to exit.
func (c *child) kill() {
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
}

// signal sends sig to the child.
func (c *child) signal(sig os.Signal) error { return c.cmd.Process.Signal(sig) }

// wait waits for the child to exit, at most timeout (then kills it), and
// returns its exit error.
func (c *child) wait(timeout time.Duration) error {
	select {
	case <-c.exited:
	case <-time.After(timeout):
		c.kill()
		return fmt.Errorf("ledger run did not exit within %v: killed", timeout)
	}
	return c.err
}

// killed reports whether the child was ended by SIGKILL.
func (c *child) killed() bool {
	var ee *exec.ExitError
	if errors.As(c.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			return ws.Signaled() && ws.Signal() == syscall.SIGKILL
		}
	}
	return false
}

// lastDurable returns the last durable event's fields, nil before the first.
func (c *child) lastDurable() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.durable.kind == "" {
		return nil
	}
	return c.durable.fields
}

// aheadEvents returns the ahead events the child printed.
func (c *child) aheadEvents() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.ahead...)
}

// doneEvent returns the done event's fields, nil if none was printed.
func (c *child) doneEvent() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		return nil
	}
	return c.done.fields
}

// exitedNow reports whether the child has exited.
func (c *child) exitedNow() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}
