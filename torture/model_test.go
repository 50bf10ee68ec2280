package torture

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/feed/pointer"
)

// TestRotationModel is the model-based test of file rotation (issue 16): a
// writer drives random sequences of appends (whole and partial lines),
// rename rotations (logrotate's create, with late writes to the renamed
// file before the new one exists), creates, copytruncate, truncations,
// compression of rotated files, deletion of rotated files the feed has
// finished, pauses of the consumer (SIGSTOP), clean stops (SIGTERM) and
// kill -9 of the consumer, a real child process that follows the input
// with Config.Rotated and writes every line it is given to an output file
// before committing it. Against a model of what was written, it checks
// that every line written is delivered, that within one run of the child
// the lines of one file come in order and once (duplicates only after a
// restart), and that no line is delivered that was not written.
//
// Short mode (make test): a few sequences, seconds. TIDEMARK_TORTURE=1
// (make torture): thousands.
func TestRotationModel(t *testing.T) {
	track(t)
	rng := newRand(t)
	sequences := pick(3, 1000)
	ops := pick(40, 60)
	for i := range sequences {
		seed := rng.Uint64()
		ok := t.Run(fmt.Sprintf("seq%d", i), func(t *testing.T) {
			t.Logf("sequence seed %d", seed)
			runModel(t, rand.New(rand.NewPCG(seed, 16)), ops)
		})
		if !ok {
			return
		}
	}
}

// feedChildEnv holds the arguments of the model's child: the input, the
// output file, and whether to use group commit.
const feedChildEnv = "TIDEMARK_FEED_MODEL_CHILD"

// feedChild is the model's consumer: it follows the input with Rotated,
// writes each batch of lines to the output (one write, after a line
// "#run PID"), then commits the batch's last line. SIGTERM stops it
// cleanly. It returns the exit code.
func feedChild(spec string) int {
	parts := strings.Split(spec, "|")
	if len(parts) != 4 {
		fmt.Fprintln(os.Stderr, "feed child: bad spec", spec)
		return 2
	}
	input, output, group := parts[0], parts[1], parts[2] == "1"
	out, err := os.OpenFile(output, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "feed child:", err)
		return 2
	}
	level := slog.LevelWarn
	if os.Getenv("TIDEMARK_MODEL_DEBUG") == "1" {
		level = slog.LevelDebug // every move between files and what decided it, in the failure's log
	}
	cfg := feed.Config{Path: input, Rotated: filepath.Base(input) + ".*", RotateWait: 20 * time.Millisecond,
		GroupCommit: group, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))}
	if parts[3] == "set" {
		// input is a glob: a file set, its registry in the folder's ptr.
		cfg.Path, cfg.Rotated, cfg.RotateWait = "", "", 0
		cfg.Paths, cfg.PointerDir, cfg.Name, cfg.ScanInterval = []string{input}, filepath.Join(filepath.Dir(input), "ptr"), "set", 10*time.Millisecond
	}
	src, err := feed.NewFileSource(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "feed child:", err)
		return 2
	}
	fmt.Fprintf(out, "\n#run %d\n", os.Getpid())
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	items := make([]feed.Item, 64)
	var buf []byte
	fmt.Println("ready")
	for {
		select {
		case <-term:
			if err := src.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "feed child: close:", err)
				return 1
			}
			return 0
		default:
		}
		n, err := src.Poll(context.Background(), items)
		if err != nil {
			fmt.Fprintln(os.Stderr, "feed child: poll:", err)
			time.Sleep(time.Millisecond)
			continue
		}
		if n == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		buf = buf[:0]
		for _, it := range items[:n] {
			buf = append(append(buf, it.Line...), '\n')
		}
		if _, err := out.Write(buf); err != nil {
			fmt.Fprintln(os.Stderr, "feed child: write:", err)
			return 1
		}
		last := items[n-1]
		if err := src.Commit(last.Epoch, last.Position); err != nil {
			fmt.Fprintln(os.Stderr, "feed child: commit:", err)
		}
	}
}

// generation is one file of the input's history: the lines written to it.
type generation struct {
	id      int
	lines   []string // complete lines, in order
	partial string   // the start of the next line, written without its '\n'
}

// model is the writer's side: the files on disk and what each holds.
type model struct {
	t      *testing.T
	rng    *rand.Rand
	dir    string
	path   string
	out    string
	gens   []*generation
	live   *generation            // the generation at the path, nil when none
	names  map[string]*generation // rotated file name → generation
	inodes map[tidemark.Identity][]*generation
	line   map[string]*generation // every complete line → its generation
	child  *exec.Cmd
	exited chan error
	runs   int
	kills  int
	logs   syncBuffer
	// set: the consumer follows the glob path as a file set (TestFileSetModel).
	set bool
}

func runModel(t *testing.T, rng *rand.Rand, ops int) {
	dir := tempDir(t)
	m := &model{t: t, rng: rng, dir: dir, path: filepath.Join(dir, "in.log"), out: filepath.Join(dir, "out.txt"),
		names: map[string]*generation{}, inodes: map[tidemark.Identity][]*generation{}, line: map[string]*generation{}}
	m.logs.w = io.Discard
	m.create()
	m.appendLines(1 + rng.IntN(50))
	m.start()
	defer m.stop(syscall.SIGKILL)
	// The feed has no history before its first record: lines of a file
	// rotated away before the feed first opened the input are not its
	// to read. So the writer starts once the pointer names the first file.
	end := time.Now().Add(modelWait)
	for m.pointerGen() != 0 {
		if time.Now().After(end) {
			m.stuck("for its first pointer record")
		}
		time.Sleep(time.Millisecond)
	}
	debug := os.Getenv("TIDEMARK_MODEL_DEBUG") == "1"
	for op := range ops {
		r := rng.IntN(100)
		if debug {
			t.Logf("op %d (%d): output %d bytes, files %v", op, r, outputSize(m.out), m.files())
		}
		switch {
		case r < 30:
			m.appendLines(1 + rng.IntN(200))
		case r < 38:
			m.appendPartial()
		case r < 50:
			m.rotate()
		case r < 55:
			m.create()
		case r < 62:
			m.copyTruncate(true)
		case r < 65:
			m.truncate()
		case r < 72:
			m.compress()
		case r < 78:
			m.deleteFinished()
		case r < 84:
			m.pause()
		case r < 88:
			m.stop(syscall.SIGTERM)
			m.start()
		default:
			m.killByProgress()
		}
	}
	if m.live == nil {
		m.create()
	}
	m.appendLines(1)
	m.finish()
}

// finish starts the consumer if it is stopped, waits until it has
// delivered every line written, stops it cleanly and checks the output.
func (m *model) finish() {
	if m.child == nil {
		m.start()
	}
	m.waitAll()
	m.stop(syscall.SIGTERM)
	m.check()
	figures.kills.Add(int64(m.kills))
	figures.runs.Add(int64(m.runs))
}

func (m *model) newGen() *generation {
	g := &generation{id: len(m.gens)}
	m.gens = append(m.gens, g)
	return g
}

// identity returns the device and inode of name.
func (m *model) identity(name string) tidemark.Identity {
	fi, err := os.Stat(name)
	if err != nil {
		m.t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return tidemark.Identity{Dev: uint64(st.Dev), Ino: uint64(st.Ino)} //nolint:unconvert
}

func (m *model) noteInode(name string, g *generation) {
	id := m.identity(name)
	m.inodes[id] = append(m.inodes[id], g)
}

func (m *model) create() {
	if m.live != nil {
		return
	}
	if err := os.WriteFile(m.path, nil, 0o644); err != nil {
		m.t.Fatal(err)
	}
	m.live = m.newGen()
	m.noteInode(m.path, m.live)
}

// lineText is line n of g: unique, of a random length.
func (m *model) lineText(g *generation) string {
	return fmt.Sprintf("g%03d-%06d-%s", g.id, len(g.lines), strings.Repeat("x", m.rng.IntN(40)))
}

// writeLines appends n complete lines to the file name of g (finishing
// its partial line first).
func (m *model) writeLines(name string, g *generation, n int) {
	var b strings.Builder
	for range n {
		var l string
		if g.partial != "" {
			l = g.partial + strings.Repeat("y", m.rng.IntN(10))
			b.WriteString(l[len(g.partial):])
			g.partial = ""
		} else {
			l = m.lineText(g)
			b.WriteString(l)
		}
		b.WriteByte('\n')
		g.lines = append(g.lines, l)
		m.line[l] = g
	}
	appendFile(m.t, name, []byte(b.String()))
}

func (m *model) appendLines(n int) {
	if m.live != nil {
		m.writeLines(m.path, m.live, n)
	}
}

func (m *model) appendPartial() {
	g := m.live
	if g == nil || g.partial != "" {
		return
	}
	l := m.lineText(g)
	g.partial = l[:1+m.rng.IntN(len(l)-1)]
	appendFile(m.t, m.path, []byte(g.partial))
}

// shift renames the numbered rotated files one number up (.2.gz → .3.gz),
// the highest first, and returns the name .1 is free under.
func (m *model) shift() string {
	type rf struct {
		n  int
		gz bool
	}
	var rs []rf
	for name := range m.names {
		rest := strings.TrimPrefix(filepath.Base(name), "in.log.")
		gz := strings.HasSuffix(rest, ".gz")
		n, err := strconv.Atoi(strings.TrimSuffix(rest, ".gz"))
		if err != nil {
			m.t.Fatalf("a rotated file %s", name)
		}
		rs = append(rs, rf{n, gz})
	}
	slices.SortFunc(rs, func(a, b rf) int { return b.n - a.n })
	names := map[string]*generation{}
	for _, r := range rs {
		suffix := ""
		if r.gz {
			suffix = ".gz"
		}
		from := fmt.Sprintf("%s.%d%s", m.path, r.n, suffix)
		to := fmt.Sprintf("%s.%d%s", m.path, r.n+1, suffix)
		if err := os.Rename(from, to); err != nil {
			m.t.Fatal(err)
		}
		names[to] = m.names[from]
	}
	m.names = names
	return m.path + ".1"
}

// rotate is logrotate's create: the file renamed to .1, late writes to it
// (the writer has not reopened yet), then, mostly, a new file at the path.
func (m *model) rotate() {
	if m.live == nil {
		return
	}
	to := m.shift()
	if err := os.Rename(m.path, to); err != nil {
		m.t.Fatal(err)
	}
	g := m.live
	m.names[to] = g
	m.live = nil
	if m.rng.IntN(3) == 0 {
		m.writeLines(to, g, 1+m.rng.IntN(30)) // late writes, before the new file exists
	}
	if m.rng.IntN(5) != 0 {
		m.create()
	}
}

// copyTruncate is logrotate's copytruncate: the file copied to .1, then
// truncated; the path keeps its identity, and a new generation starts in
// it. A partial line is lost with the truncation (it was never a line).
//
// The feed must have started on the file (delivered its first line, when
// it has one): a file it has read nothing of since it was created or last
// truncated has no bytes the feed could know its copy by (a documented
// limit), and a copytruncate then would lose the copy's lines. wait says
// whether to wait for that (the consumer runs), else the copytruncate is
// skipped.
func (m *model) copyTruncate(wait bool) {
	if m.live == nil {
		return
	}
	if g := m.live; len(g.lines) > 0 {
		if d := m.delivered(); !d[g.lines[0]] {
			if !wait || m.child == nil {
				return
			}
			if !m.waitDelivered(g.lines[:1]) {
				m.stuck("to deliver the first line of the file to copytruncate")
			}
		}
	}
	to := m.shift()
	b, err := os.ReadFile(m.path)
	if err != nil {
		m.t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		m.t.Fatal(err)
	}
	if err := os.Truncate(m.path, 0); err != nil {
		m.t.Fatal(err)
	}
	old := m.live
	old.partial = ""
	m.names[to] = old
	m.noteInode(to, old)
	m.live = m.newGen()
	m.noteInode(m.path, m.live)
}

// truncate empties the file in place once the consumer has every line of
// it (a log reset): the lines it held were delivered.
func (m *model) truncate() {
	if m.live == nil || m.child == nil {
		return
	}
	want := slices.Clone(m.live.lines)
	if !m.waitDelivered(want) {
		m.stuck("to deliver the lines of the file to truncate")
	}
	if err := os.Truncate(m.path, 0); err != nil {
		m.t.Fatal(err)
	}
	m.live.partial = ""
	m.live = m.newGen()
	m.noteInode(m.path, m.live)
}

// compress gzips a rotated file (name.gz with its time, name removed).
func (m *model) compress() {
	var cands []string
	for name, g := range m.names {
		// logrotate's notifempty (the usual setting): an empty file is not
		// rotated into a compressed one (see the limits in feed's doc).
		if !strings.HasSuffix(name, ".gz") && len(g.lines) > 0 {
			cands = append(cands, name)
		}
	}
	if len(cands) == 0 {
		return
	}
	slices.Sort(cands)
	name := cands[m.rng.IntN(len(cands))]
	b, err := os.ReadFile(name)
	if err != nil {
		m.t.Fatal(err)
	}
	fi, err := os.Stat(name)
	if err != nil {
		m.t.Fatal(err)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(b)
	zw.Close()
	if err := os.WriteFile(name+".gz", z.Bytes(), 0o644); err != nil {
		m.t.Fatal(err)
	}
	os.Chtimes(name+".gz", fi.ModTime(), fi.ModTime())
	if err := os.Remove(name); err != nil {
		m.t.Fatal(err)
	}
	g := m.names[name]
	delete(m.names, name)
	m.names[name+".gz"] = g
	m.noteInode(name+".gz", g)
}

// pointerGen returns the oldest generation that ever had the identity the
// pointer names now: every generation before it is finished (the feed
// leaves a file only once it has read it to its end and its lines are
// committed). -1 when the pointer names none.
func (m *model) pointerGen() int {
	b, err := os.ReadFile(m.path + pointer.Suffix)
	if err != nil {
		return -1
	}
	var best pointer.Record
	var bestSeq uint64
	found := false
	for off := 0; off+pointer.RecordSize <= len(b); off += pointer.SlotSize {
		rec := b[off : off+pointer.RecordSize]
		p, err := pointer.Decode(rec)
		if seq := binary.LittleEndian.Uint64(rec[8:16]); err == nil && (!found || seq > bestSeq) {
			best, bestSeq, found = p, seq, true
		}
	}
	if !found || len(m.inodes[best.Identity]) == 0 {
		return -1
	}
	return m.inodes[best.Identity][0].id
}

// deleteFinished removes a rotated file of a generation the pointer has
// moved past.
func (m *model) deleteFinished() {
	pg := m.pointerGen()
	var cands []string
	for name, g := range m.names {
		if g.id < pg {
			cands = append(cands, name)
		}
	}
	if len(cands) == 0 {
		return
	}
	slices.Sort(cands)
	name := cands[m.rng.IntN(len(cands))]
	if err := os.Remove(name); err != nil {
		m.t.Fatal(err)
	}
	delete(m.names, name)
}

// start starts the consumer and waits until it has its source.
func (m *model) start() {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	group := "0"
	if m.rng.IntN(2) == 0 {
		group = "1"
	}
	mode := "file"
	if m.set {
		mode = "set"
	}
	cmd.Env = append(os.Environ(), feedChildEnv+"="+m.path+"|"+m.out+"|"+group+"|"+mode)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		m.t.Fatal(err)
	}
	cmd.Stderr = &m.logs
	if err := cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		b := make([]byte, 6)
		_, err := io.ReadFull(stdout, b)
		ready <- err == nil && string(b) == "ready\n"
		io.Copy(io.Discard, stdout)
	}()
	select {
	case ok := <-ready:
		if !ok {
			cmd.Process.Kill()
			cmd.Wait()
			m.t.Fatalf("the consumer did not start:\n%s", m.logs.String())
		}
	case <-time.After(childTimeout):
		cmd.Process.Kill()
		m.t.Fatalf("the consumer did not start in time:\n%s", m.logs.String())
	}
	m.child = cmd
	m.exited = make(chan error, 1)
	go func() { m.exited <- cmd.Wait() }()
	m.runs++
}

// stop ends the consumer with sig and waits for it.
func (m *model) stop(sig syscall.Signal) {
	if m.child == nil {
		return
	}
	m.child.Process.Signal(syscall.SIGCONT)
	m.child.Process.Signal(sig)
	select {
	case err := <-m.exited:
		if sig == syscall.SIGTERM && err != nil {
			m.t.Fatalf("the consumer's clean stop failed: %v\n%s", err, m.logs.String())
		}
	case <-time.After(childTimeout):
		m.child.Process.Kill()
		<-m.exited
		m.t.Fatalf("the consumer did not stop:\n%s", m.logs.String())
	}
	m.child = nil
}

// killByProgress kills the consumer once it has written some more lines
// (or at once when it has nothing to do), then starts it again.
func (m *model) killByProgress() {
	if m.child == nil {
		m.start()
		return
	}
	before := outputSize(m.out)
	more := int64(m.rng.IntN(4000))
	end := time.Now().Add(modelWait)
	for outputSize(m.out) < before+more && !m.allDelivered() {
		if time.Now().After(end) {
			m.stuck("to deliver more lines before a kill")
		}
		time.Sleep(time.Millisecond)
	}
	m.stop(syscall.SIGKILL)
	m.kills++
	m.start()
}

// stuck fails the test: the consumer made no progress for modelWait. It
// asks the consumer for its goroutines (SIGQUIT) first, for the log.
func (m *model) stuck(what string) {
	if m.child != nil {
		m.child.Process.Signal(syscall.SIGQUIT)
		select {
		case <-m.exited:
		case <-time.After(5 * time.Second):
		}
		m.child = nil
	}
	d := m.delivered()
	var missing []string
	for _, g := range m.gens {
		for i, l := range g.lines {
			if !d[l] {
				missing = append(missing, fmt.Sprintf("gen %d line %d of %d", g.id, i, len(g.lines)))
				break
			}
		}
	}
	where := map[string]int{}
	for n, g := range m.names {
		where[n] = g.id
	}
	m.t.Logf("generations with lines not delivered: %v; files: %v; live gen %v", missing, where, m.live)
	logFile := m.saveLog()
	m.t.Fatalf("the consumer made no progress for %v, waiting %s\nfiles: %v\nconsumer log (whole in %s):\n%s", modelWait, what, m.files(), logFile, tail(m.logs.String()))
}

// saveLog writes the consumer's whole log to a file outside the test's
// folder (which is removed when the test ends) and returns its name.
func (m *model) saveLog() string {
	f, err := os.CreateTemp("", "tidemark-model-consumer-*.log")
	if err != nil {
		return "(not written: " + err.Error() + ")"
	}
	defer f.Close()
	if _, err := f.WriteString(m.logs.String()); err != nil {
		return "(not written: " + err.Error() + ")"
	}
	return f.Name()
}

// pause freezes the consumer (a consumer whose queue is full does not
// poll) while the writer goes on, then thaws it.
func (m *model) pause() {
	if m.child == nil {
		return
	}
	m.child.Process.Signal(syscall.SIGSTOP)
	for range 1 + m.rng.IntN(4) {
		switch m.rng.IntN(3) {
		case 0:
			m.appendLines(1 + m.rng.IntN(300))
		case 1:
			m.rotate()
		default:
			m.copyTruncate(false)
		}
	}
	m.child.Process.Signal(syscall.SIGCONT)
}

func outputSize(name string) int64 {
	fi, err := os.Stat(name)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// delivered returns the set of lines in the output.
func (m *model) delivered() map[string]bool {
	b, _ := os.ReadFile(m.out)
	out := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		out[l] = true
	}
	return out
}

func (m *model) allDelivered() bool {
	d := m.delivered()
	for l := range m.line {
		if !d[l] {
			return false
		}
	}
	return true
}

// modelWait bounds a wait for the consumer to deliver lines: a safety net
// (the consumer delivers in milliseconds), never a condition.
const modelWait = 60 * time.Second

// waitDelivered waits until every line of want is in the output.
func (m *model) waitDelivered(want []string) bool {
	end := time.Now().Add(modelWait)
	for time.Now().Before(end) {
		d := m.delivered()
		missing := false
		for _, l := range want {
			if !d[l] {
				missing = true
				break
			}
		}
		if !missing {
			return true
		}
		time.Sleep(2 * time.Millisecond)
	}
	return false
}

// waitAll waits until every line written is in the output, and fails
// with the first missing ones otherwise.
func (m *model) waitAll() {
	var all []string
	for _, g := range m.gens {
		all = append(all, g.lines...)
	}
	if m.waitDelivered(all) {
		return
	}
	d := m.delivered()
	var missing []string
	for _, l := range all {
		if !d[l] {
			missing = append(missing, l)
		}
	}
	logFile := m.saveLog()
	m.t.Fatalf("%d of %d lines never delivered, the first %q\nfiles: %v\nconsumer log (whole in %s):\n%s", len(missing), len(all), missing[:min(5, len(missing))], m.files(), logFile, tail(m.logs.String()))
}

// files lists the input's files, for a failure.
func (m *model) files() []string {
	entries, _ := os.ReadDir(m.dir)
	var out []string
	for _, e := range entries {
		fi, _ := e.Info()
		out = append(out, fmt.Sprintf("%s (%d bytes)", e.Name(), fi.Size()))
	}
	return out
}

// check reads the output: every line was written (a torn last write of a
// killed run aside), and within a run the lines of each generation come
// in order, each once.
func (m *model) check() {
	b, err := os.ReadFile(m.out)
	if err != nil {
		m.t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	last := map[int]int{} // generation → index of its last line in this run
	run := 0
	for i, l := range lines {
		switch {
		case l == "":
			continue
		case strings.HasPrefix(l, "#run "):
			run++
			clear(last)
			continue
		}
		g := m.line[l]
		if g == nil {
			// A write torn by a kill: the last line before the next run.
			if next := nextNonEmpty(lines, i+1); next == "" || strings.HasPrefix(next, "#run ") {
				continue
			}
			m.t.Fatalf("run %d delivered %q, a line never written", run, l)
		}
		idx := slices.Index(g.lines, l)
		if prev, ok := last[g.id]; ok && idx <= prev {
			m.t.Fatalf("run %d delivered line %d of generation %d after its line %d (out of order, or twice in one run): %q\nfiles: %v\nconsumer log (whole in %s):\n%s", run, idx, g.id, prev, l, m.files(), m.saveLog(), tail(m.logs.String()))
		}
		last[g.id] = idx
	}
	if run != m.runs {
		m.t.Fatalf("%d runs in the output, %d started", run, m.runs)
	}
}

func nextNonEmpty(lines []string, i int) string {
	for ; i < len(lines); i++ {
		if lines[i] != "" {
			return lines[i]
		}
	}
	return ""
}
