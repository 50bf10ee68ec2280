package feed

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// refLine is a line or a skip expected from the framer.
type refLine struct {
	Line  string
	Start int64 // of a skip
	End   int64 // Position of a line, end of a skip
	Skip  bool
}

// refFrame splits data the simple way: what the framer must produce, and how
// many bytes of an unterminated last line remain.
func refFrame(data []byte, maxLine int) ([]refLine, int64) {
	var out []refLine
	var start int64
	for {
		i := bytes.IndexByte(data[start:], '\n')
		if i < 0 {
			return out, int64(len(data)) - start
		}
		end := start + int64(i) + 1
		payload := data[start : end-1]
		payload = bytes.TrimSuffix(payload, []byte("\r"))
		if len(payload) > maxLine {
			out = append(out, refLine{Start: start, End: end, Skip: true})
		} else {
			out = append(out, refLine{Line: string(payload), End: end})
		}
		start = end
	}
}

// runFramer drives a framer over rd the way FileSource.Poll does: lines are
// only copied once a "poll" (a batch of up to batch items) ends, so fill
// runs without compaction while lines of the batch are in use.
func runFramer(t testing.TB, rd io.Reader, maxLine, batch, bufSize int, start int64, resync bool) ([]refLine, int64, *framer) {
	t.Helper()
	var out []refLine
	f := newFramer(maxLine, nil)
	if bufSize > 0 {
		f.base, f.buf = bufSize, make([]byte, bufSize)
	}
	f.onSkip = func(kind skipKind, s, e int64) {
		if kind == skipOversize {
			out = append(out, refLine{Start: s, End: e, Skip: true})
		}
	}
	f.reset(start, resync)
	items := make([]Item, batch)
	eof := false
	var lastEnd int64
	for polls := 0; !eof; polls++ {
		if polls > 1<<22 {
			t.Fatal("framer does not make progress")
		}
		n := 0
		for {
			n += f.frame(items[n:])
			if n == len(items) {
				break
			}
			got, err := f.fill(rd, n == 0)
			if got > 0 {
				continue
			}
			if errors.Is(err, errBufferFull) {
				break
			}
			if err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("fill: %v", err)
			}
			if err != nil {
				eof = true
			}
			break
		}
		for _, it := range items[:n] {
			if it.Position <= lastEnd {
				t.Fatalf("position %d after %d", it.Position, lastEnd)
			}
			lastEnd = it.Position
			out = append(out, refLine{Line: string(it.Line), End: it.Position})
		}
	}
	// Skips are reported while a poll frames, lines when it ends: merge
	// them in input order.
	slices.SortStableFunc(out, func(a, b refLine) int { return cmp.Compare(a.End, b.End) })
	return out, f.pending(), f
}

func TestFramerCases(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		max     int
		want    []refLine
		pending int64
	}{
		{"empty", "", 10, nil, 0},
		{"one line", "a\n", 10, []refLine{{Line: "a", End: 2}}, 0},
		{"crlf stripped", "ab\r\ncd\n", 10, []refLine{{Line: "ab", End: 4}, {Line: "cd", End: 7}}, 0},
		{"lone cr kept", "a\rb\n", 10, []refLine{{Line: "a\rb", End: 4}}, 0},
		{"empty lines", "\n\r\n\n", 10, []refLine{{End: 1}, {End: 3}, {End: 4}}, 0},
		{"partial last line", "a\nbc", 10, []refLine{{Line: "a", End: 2}}, 2},
		{"only partial", "abc", 10, nil, 3},
		{"exactly max", "abcd\n", 4, []refLine{{Line: "abcd", End: 5}}, 0},
		{"exactly max with cr", "abcd\r\n", 4, []refLine{{Line: "abcd", End: 6}}, 0},
		{"max plus one", "abcde\nx\n", 4, []refLine{{Start: 0, End: 6, Skip: true}, {Line: "x", End: 8}}, 0},
		{"long oversize", strings.Repeat("z", 100) + "\nok\n", 4, []refLine{{Start: 0, End: 101, Skip: true}, {Line: "ok", End: 104}}, 0},
		{"oversize unterminated", "ok\n" + strings.Repeat("z", 50), 4, []refLine{{Line: "ok", End: 3}}, 50},
	}
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"onebyte":  iotest.OneByteReader,
		"half":     iotest.HalfReader,
		"dataerr":  iotest.DataErrReader,
		"twobytes": func(r io.Reader) io.Reader { return &chunkReader{r: r, sizes: []int{2}} },
	}
	for _, tt := range tests {
		for rname, wrap := range readers {
			for _, c := range []struct{ batch, buf int }{{1, 0}, {3, 0}, {100, 0}, {1, tt.max + 2}, {3, 3}} {
				t.Run(fmt.Sprintf("%s/%s/batch%d/buf%d", tt.name, rname, c.batch, c.buf), func(t *testing.T) {
					got, pending, _ := runFramer(t, wrap(strings.NewReader(tt.in)), tt.max, c.batch, c.buf, 0, false)
					if !slices.Equal(got, tt.want) {
						t.Fatalf("lines\n got %v\nwant %v", got, tt.want)
					}
					if pending != tt.pending {
						t.Fatalf("pending %d, want %d", pending, tt.pending)
					}
					ref, refPending := refFrame([]byte(tt.in), tt.max)
					if !slices.Equal(ref, tt.want) || refPending != tt.pending {
						t.Fatalf("reference disagrees with the table: %v %d", ref, refPending)
					}
				})
			}
		}
	}
}

// TestFramerLongLineGrowsAndShrinks: a line longer than the initial buffer
// but within the maximum is delivered whole, and the buffer goes back to its
// initial size afterwards.
func TestFramerLongLineGrowsAndShrinks(t *testing.T) {
	long := strings.Repeat("L", 3*framerBufSize)
	in := "a\n" + long + "\nb\n" + strings.Repeat("c\n", framerBufSize)
	got, _, f := runFramer(t, iotest.HalfReader(strings.NewReader(in)), 4*framerBufSize, 7, 0, 0, false)
	if len(got) != 3+framerBufSize || got[1].Line != long || got[2].Line != "b" {
		t.Fatalf("got %d lines; second is %d bytes", len(got), len(got[1].Line))
	}
	if len(f.buf) > framerBufSize {
		t.Fatalf("buffer stayed at %d bytes after the long line", len(f.buf))
	}
}

// TestFramerOversizeBoundedMemory: a huge line is skipped without the buffer
// growing beyond MaxLineBytes+2.
func TestFramerOversizeBoundedMemory(t *testing.T) {
	const maxLine = 100 << 10
	in := io.MultiReader(strings.NewReader("x\n"), &repeatReader{b: 'z', n: 10 << 20}, strings.NewReader("\ny\n"))
	f := newFramer(maxLine, nil)
	var skips []refLine
	f.onSkip = func(_ skipKind, s, e int64) { skips = append(skips, refLine{Start: s, End: e, Skip: true}) }
	items := make([]Item, 4)
	var lines []string
	for {
		n := f.frame(items)
		for _, it := range items[:n] {
			lines = append(lines, string(it.Line))
		}
		if len(f.buf) > max(framerBufSize, maxLine+2) {
			t.Fatalf("buffer grew to %d bytes", len(f.buf))
		}
		if n > 0 {
			continue
		}
		if _, err := f.fill(in, true); err == io.EOF {
			break
		}
	}
	want := []refLine{{Start: 2, End: 2 + 10<<20 + 1, Skip: true}}
	if len(f.buf) > maxLine+2 {
		t.Fatalf("buffer of %d bytes", len(f.buf))
	}
	if fmt.Sprint(skips) != fmt.Sprint(want) || fmt.Sprint(lines) != "[x y]" {
		t.Fatalf("skips %v lines %v", skips, lines)
	}
}

// TestFramerResync: a start inside a line skips to the next line start.
func TestFramerResync(t *testing.T) {
	in := "abc\ndef\n"
	var resyncs []refLine
	f := newFramer(10, func(k skipKind, s, e int64) {
		if k == skipResync {
			resyncs = append(resyncs, refLine{Start: s, End: e, Skip: true})
		}
	})
	f.reset(2, true)
	if f.position() != 2 {
		t.Fatalf("position %d", f.position())
	}
	rd := strings.NewReader(in[2:])
	items := make([]Item, 4)
	if _, err := f.fill(rd, true); err != nil {
		t.Fatal(err)
	}
	n := f.frame(items)
	if n != 1 || string(items[0].Line) != "def" || items[0].Position != 8 {
		t.Fatalf("got %d items: %q at %d", n, items[0].Line, items[0].Position)
	}
	if fmt.Sprint(resyncs) != fmt.Sprint([]refLine{{Start: 2, End: 4, Skip: true}}) {
		t.Fatalf("resyncs %v", resyncs)
	}
}

// chunkReader returns at most sizes[i] bytes on its i-th read (cycling).
type chunkReader struct {
	r     io.Reader
	sizes []int
	i     int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	n := 1
	if len(c.sizes) > 0 {
		n = max(1, c.sizes[c.i%len(c.sizes)])
		c.i++
	}
	return c.r.Read(p[:min(n, len(p))])
}

// repeatReader yields n copies of b.
type repeatReader struct {
	b byte
	n int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = r.b
	}
	r.n -= k
	return k, nil
}

// BenchmarkFramer frames 100-byte lines from memory; allocs/op is per pass
// over 10,000 lines and must be 0.
func BenchmarkFramer(b *testing.B) {
	line := strings.Repeat("x", 99) + "\n"
	data := []byte(strings.Repeat(line, 10000))
	f := newFramer(0, nil)
	items := make([]Item, 256)
	rd := bytes.NewReader(data)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(data)
		f.reset(0, false)
		lines := 0
		for {
			n := f.frame(items)
			lines += n
			if n > 0 {
				continue
			}
			if _, err := f.fill(rd, true); err == io.EOF {
				break
			}
		}
		if lines != 10000 {
			b.Fatalf("%d lines", lines)
		}
	}
}
