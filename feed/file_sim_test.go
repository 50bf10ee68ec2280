package feed

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
)

// simModel is what a Committed source must deliver from a file written by
// a known sequence of operations.
type simModel struct {
	content []byte // the file at the path
	readPos int64  // where the source has read it to (a line start)
	dropped uint64 // unterminated last lines of files left behind
	next    int    // the next line number
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
			s := open(t, p, Config{Sync: SyncNever})
			s.drain()
			epoch := s.Status().Epoch
			var lastSeq uint64
			rotations := 0
			for step := range 150 {
				var op string
				wantEpoch := "same"
				switch k := r.IntN(12); {
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
					if m.readPos > 0 {
						wantEpoch = "new"
					} else {
						wantEpoch = "any"
					}
					if int64(len(m.content)) > m.readPos {
						m.dropped++
					}
					m.content = m.lines(r)
					m.readPos = 0
					write(t, p, string(m.content))
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
					m.content, m.readPos = nil, 0
					if err := os.Truncate(p, 0); err != nil {
						t.Fatal(err)
					}
				default:
					op = "restart"
					s.Close()
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
						wantEpoch = "new"
						if m.readPos == 0 {
							wantEpoch = "any"
						}
						m.content, m.readPos = m.lines(r), 0
						write(t, p, string(m.content))
					case 2:
						op += " after a copy"
						m.content = append(m.content, m.lines(r)...)
						replaceByRename(t, p, string(m.content))
					case 3:
						op += " after a truncation"
						wantEpoch = "new"
						if m.readPos == 0 {
							wantEpoch = "any"
						}
						m.content, m.readPos = nil, 0
						if err := os.Truncate(p, 0); err != nil {
							t.Fatal(err)
						}
					}
					s = open(t, p, Config{Sync: SyncNever})
					lastSeq, m.dropped = 0, 0
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
					if err := s.Commit(g[len(g)-1].Epoch, g[len(g)-1].Position); err != nil {
						t.Fatal(err)
					}
				}
			}
			if st := s.Status(); st.PartialDropped != m.dropped {
				t.Fatalf("partial lines dropped %d, want %d", st.PartialDropped, m.dropped)
			}
		})
	}
}
