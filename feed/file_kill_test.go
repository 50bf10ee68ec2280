package feed

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const sourceChildEnv = "TIDEMARK_SOURCE_CHILD"

// killLine is the fixed-width line i of the kill test's input: line i ends
// at position 12*i.
func killLine(i int) string { return fmt.Sprintf("line-%06d\n", i) }

// sourceChild is the child process of TestFileSourceKill: it reads its input
// with a Committed source in batches of 7, prints "processed <epoch>
// <position>" for every line, then commits the batch and prints "committed
// <epoch> <position>".
func sourceChild(path string) { killChild(Config{Path: path}, false) }

// killChild reads with a source of cfg in batches of 7 until killed, and
// prints "processed <epoch> <position>" for every line (unbuffered: one
// write per line), then for each batch "committed <epoch> <position>" after
// its commit, or, with before, "committing <epoch> <position>" before it.
// The source resumes from points, if any (ResumeFrom).
func killChild(cfg Config, before bool, points ...ResumePoint) {
	s, err := NewFileSource(cfg)
	if err == nil && len(points) > 0 {
		err = s.ResumeFrom(points)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	items := make([]Item, 7)
	for {
		n, err := s.Poll(context.Background(), items)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if n == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		for _, it := range items[:n] {
			fmt.Fprintf(os.Stdout, "processed %d %d\n", it.Epoch, it.Position)
		}
		last := items[n-1]
		if before {
			fmt.Fprintf(os.Stdout, "committing %d %d\n", last.Epoch, last.Position)
		}
		if err := s.Commit(last.Epoch, last.Position); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if !before {
			fmt.Fprintf(os.Stdout, "committed %d %d\n", last.Epoch, last.Position)
		}
	}
}

// TestFileSourceKill kills a real process reading with a Committed source
// with SIGKILL, several times, at moments chosen by its progress. After
// each kill the pointer is in the child's epoch, at a line start, at or
// after the last commit the child reported and at most one batch later; a
// restart delivers the line at the pointer first. Over all runs every line
// is processed: duplicates, never a gap.
func TestFileSourceKill(t *testing.T) {
	if v := os.Getenv(sourceChildEnv); v != "" {
		sourceChild(v)
		return
	}
	killRounds(t, "TestFileSourceKill", sourceChildEnv, "committed", []int{1, 50, 300}, Config{},
		func(pos, last int64) bool { return pos >= last && pos <= last+7*12 })
}

// killRounds is the body of a kill test. On an input of 20,000 fixed-width
// lines, for each count in rounds, the child (test, run with env) is
// killed with SIGKILL once it printed that many commit lines (word). Then
// the pointer must be in the epoch kept from the first round, at a line
// start, past no line the child did not process, and where posOK says
// against the child's last commit line. A last run in process with cfg
// reads the rest: every line was processed.
func killRounds(t *testing.T, test, env, word string, rounds []int, cfg Config, posOK func(pos, last int64) bool) {
	t.Helper()
	const total = 20000
	p := filepath.Join(t.TempDir(), "in.log")
	var b strings.Builder
	for i := 1; i <= total; i++ {
		b.WriteString(killLine(i))
	}
	write(t, p, b.String())
	processed := make([]bool, total+1)
	var epoch uint64
	for round, commits := range rounds {
		ep, last, seen := runKillChild(t, p, test, env, word, commits)
		for _, pos := range seen {
			processed[pos/12] = true
		}
		if epoch != 0 && ep != epoch {
			t.Fatalf("round %d: the child read in epoch %d, want the kept epoch %d", round, ep, epoch)
		}
		epoch = ep
		res := loadPointer(t, p)
		if !res.Found || res.Record.Epoch != epoch {
			t.Fatalf("round %d: pointer %+v, want epoch %d", round, res, epoch)
		}
		pos := res.Record.Position
		if pos%12 != 0 || !posOK(pos, last) {
			t.Fatalf("round %d: pointer at %d; the child's last %q line was of %d", round, pos, word, last)
		}
		for i := int64(1); i <= pos/12; i++ {
			if !processed[i] {
				t.Fatalf("round %d: the pointer %d passes line %d, which was never processed", round, pos, i)
			}
		}
	}
	// The last run, in process, reads the rest.
	readRestAfterKills(t, p, cfg, epoch, processed)
}

// readRestAfterKills is the last run of a kill test, in process: it
// starts at the line after the pointer, in the kept epoch, and after it
// every line of the input (processed[1:]) was processed at least once.
func readRestAfterKills(t *testing.T, p string, cfg Config, epoch uint64, processed []bool) {
	t.Helper()
	s := open(t, p, cfg)
	g := s.drain()
	if len(g) == 0 || g[0].Epoch != epoch || g[0].Position != loadPointer(t, p).Record.Position+12 {
		t.Fatalf("restart: first line %+v", g[:min(1, len(g))])
	}
	for _, x := range g {
		processed[x.Position/12] = true
	}
	for i := 1; i < len(processed); i++ {
		if !processed[i] {
			t.Fatalf("line %d was never processed", i)
		}
	}
}

// runKillChild runs test in a child process, with env set to path, until
// the child printed at least commits lines "WORD epoch position" (word
// being what the child prints for a commit), kills it with SIGKILL, and
// returns its epoch, the last position of such a line, and the positions
// it reported processed ("processed epoch position").
func runKillChild(t *testing.T, path, test, env, word string, commits int) (uint64, int64, []int64) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	timer := time.AfterFunc(deadline, func() { cmd.Process.Kill() })
	defer timer.Stop()
	var epoch uint64
	var last int64
	var seen []int64
	n := 0
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue
		}
		e, _ := strconv.ParseUint(f[1], 10, 64)
		pos, _ := strconv.ParseInt(f[2], 10, 64)
		epoch = e
		switch f[0] {
		case "processed":
			seen = append(seen, pos)
		case word:
			last = pos
			n++
			if n >= commits && !killed {
				killed = true
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("the child ended before it was killed: %v\n%s", err, stderr.String())
	}
	return epoch, last, seen
}
