package feed

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
)

// simMaxLine is the simulation's MaxLineBytes: longer than every line
// m.lines writes.
const simMaxLine = 48

// simModel is what a Committed source must deliver from a file written by
// a known sequence of operations.
type simModel struct {
	content   []byte // the file at the path
	readPos   int64  // where the source has read it to (a line start)
	committed int64  // the position of the last line delivered: committed
	dropped   uint64 // unterminated last lines of files left behind
	oversize  uint64 // lines longer than simMaxLine
	next      int    // the next line number
}

// expect returns the complete lines after readPos, with their positions,
// and moves readPos past them.
func (m *simModel) expect() []got {
	var out []got
	for {
		rest := m.content[m.readPos:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			return out
		}
		line := bytes.TrimSuffix(rest[:i], []byte("\r"))
		m.readPos += int64(i) + 1
		if len(line) > simMaxLine {
			m.oversize++
			continue
		}
		out = append(out, got{Line: string(line), Position: m.readPos})
	}
}

func (m *simModel) lines(r *rand.Rand) []byte {
	var b bytes.Buffer
	for range r.IntN(5) + 1 {
		eol := "\n"
		if r.IntN(4) == 0 {
			eol = "\r\n"
		}
		fmt.Fprintf(&b, "n%d-%s%s", m.next, bytes.Repeat([]byte{'x'}, r.IntN(30)), eol)
		m.next++
	}
	return b.Bytes()
}

// TestSimulation drives a Committed source through random appends, partial
// lines, rotations by rename, copies renamed over the path, truncations and
// restarts, and checks every delivered line, position and epoch against a
// model of the file.
func TestSimulation(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 42))
			p := input(t, "")
			write(t, p, "")
			m := &simModel{}
			s := open(t, p, Config{Sync: SyncNever, MaxLineBytes: simMaxLine})
			s.drain()
			epoch := s.Status().Epoch
			var lastSeq uint64
			rotations := 0
			for step := range 150 {
				var op string
				var recovered []byte // bytes of a renamed file after the pointer, finished at the restart
				wantEpoch := "same"
				switch k := r.IntN(13); {
				case k < 5:
					op = "append lines"
					b := m.lines(r)
					m.content = append(m.content, b...)
					appendTo(t, p, string(b))
				case k < 7:
					op = "append a partial line"
					part := fmt.Sprintf("part%d", m.next)
					m.content = append(m.content, part...)
					appendTo(t, p, part)
				case k < 8:
					op = "rotate by rename"
					rotations++
					if err := os.Rename(p, fmt.Sprintf("%s.%d", p, rotations)); err != nil {
						t.Fatal(err)
					}
					// Every byte of the old file was read: a new file with
					// other bytes starts a new epoch.
					wantEpoch = "new"
					if len(m.content) == 0 {
						wantEpoch = "any"
					}
					if int64(len(m.content)) > m.readPos {
						m.dropped++
					}
					m.content = m.lines(r)
					m.readPos, m.committed = 0, 0
					write(t, p, string(m.content))
				case k == 12:
					op = "append an oversize line (maybe unterminated)"
					b := bytes.Repeat([]byte{'z'}, simMaxLine+1+r.IntN(200))
					if r.IntN(2) == 0 {
						b = append(b, '\n')
					}
					m.content = append(m.content, b...)
					appendTo(t, p, string(b))
				case k < 9:
					op = "copy renamed over the path"
					m.content = append(m.content, m.lines(r)...)
					replaceByRename(t, p, string(m.content))
				case k < 10:
					op = "truncate"
					if len(m.content) > 0 {
						wantEpoch = "new"
						if int64(len(m.content)) > m.readPos {
							m.dropped++
						}
					}
					m.content, m.readPos, m.committed = nil, 0, 0
					if err := os.Truncate(p, 0); err != nil {
						t.Fatal(err)
					}
				default:
					op = "restart"
					s.Close()
					// The restart reads on from the pointer: the oversize
					// lines after it are skipped (and counted) again.
					m.readPos = m.committed
					// The pointer's fingerprint covers every byte read up to
					// 4096 when a line was delivered; without one, a
					// changed file may still match it.
					changed := "new"
					if m.committed == 0 {
						changed = "any"
					}
					// What happens to the file while the source is down is
					// decided by the open-time table.
					switch r.IntN(5) {
					case 0:
						op += " after appending"
						b := m.lines(r)
						m.content = append(m.content, b...)
						appendTo(t, p, string(b))
					case 1:
						op += " after a rotation"
						rotations++
						if err := os.Rename(p, fmt.Sprintf("%s.%d", p, rotations)); err != nil {
							t.Fatal(err)
						}
						if m.committed == 0 {
							// Whether the new file matches a pointer at 0
							// depends on its fingerprint: the model cannot
							// tell whether the renamed file is finished
							// first, so it goes.
							if err := os.Remove(fmt.Sprintf("%s.%d", p, rotations)); err != nil {
								t.Fatal(err)
							}
						} else {
							// The renamed file is found by its identity and
							// finished first: what is after the pointer is
							// only skipped oversize lines and an
							// unterminated line (every complete line was
							// delivered and committed).
							recovered = m.content[m.committed:]
						}
						wantEpoch = changed
						m.content, m.readPos, m.committed = m.lines(r), 0, 0
						write(t, p, string(m.content))
					case 2:
						op += " after a copy"
						m.content = append(m.content, m.lines(r)...)
						replaceByRename(t, p, string(m.content))
					case 3:
						op += " after a truncation"
						wantEpoch = changed
						m.content, m.readPos, m.committed = nil, 0, 0
						if err := os.Truncate(p, 0); err != nil {
							t.Fatal(err)
						}
					}
					s = open(t, p, Config{Sync: SyncNever, MaxLineBytes: simMaxLine})
					lastSeq, m.dropped, m.oversize = 0, 0, 0
					for len(recovered) > 0 {
						i := bytes.IndexByte(recovered, '\n')
						if i < 0 {
							m.dropped++
							break
						}
						if len(bytes.TrimSuffix(recovered[:i], []byte("\r"))) > simMaxLine {
							m.oversize++
						}
						recovered = recovered[i+1:]
					}
				}
				want := m.expect()
				g := s.drain()
				if len(g) != len(want) {
					t.Fatalf("step %d (%s): got %d lines %+v, want %+v", step, op, len(g), g, want)
				}
				for i := range g {
					if g[i].Line != want[i].Line || g[i].Position != want[i].Position {
						t.Fatalf("step %d (%s): line %d is %q at %d, want %q at %d", step, op, i, g[i].Line, g[i].Position, want[i].Line, want[i].Position)
					}
					if g[i].Seq != lastSeq+1 {
						t.Fatalf("step %d (%s): seq %d after %d", step, op, g[i].Seq, lastSeq)
					}
					lastSeq = g[i].Seq
				}
				st := s.Status()
				switch {
				case wantEpoch == "same" && st.Epoch != epoch:
					t.Fatalf("step %d (%s): epoch changed from %d to %d", step, op, epoch, st.Epoch)
				case wantEpoch == "new" && st.Epoch <= epoch:
					t.Fatalf("step %d (%s): epoch %d, want a new one above %d", step, op, st.Epoch, epoch)
				}
				epoch = st.Epoch
				if st.ReadPosition != m.readPos {
					t.Fatalf("step %d (%s): read position %d, want %d", step, op, st.ReadPosition, m.readPos)
				}
				if len(g) > 0 {
					m.committed = g[len(g)-1].Position
					if err := s.Commit(g[len(g)-1].Epoch, g[len(g)-1].Position); err != nil {
						t.Fatal(err)
					}
				}
			}
			if st := s.Status(); st.PartialDropped != m.dropped || st.OversizeSkipped != m.oversize {
				t.Fatalf("partial lines dropped %d, oversize %d; want %d, %d\n%s", st.PartialDropped, st.OversizeSkipped, m.dropped, m.oversize, s.log)
			}
		})
	}
}
