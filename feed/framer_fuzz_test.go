package feed

import (
	"bytes"
	"slices"
	"testing"
)

// FuzzFramer feeds arbitrary bytes to the framer in arbitrary chunks and
// batch sizes, with a small maximum line length, and checks the lines,
// positions and skips against a plain split on '\n'.
func FuzzFramer(f *testing.F) {
	f.Add([]byte("a\nb\r\nc"), []byte{1, 2, 3}, uint8(4), uint8(2))
	f.Add([]byte("\n\n\r\n"), []byte{1}, uint8(0), uint8(0))
	f.Add([]byte("toolongline\nok\n"), []byte{5}, uint8(3), uint8(1))
	f.Add([]byte("x\r"), []byte{}, uint8(1), uint8(7))
	f.Fuzz(func(t *testing.T, data []byte, chunks []byte, maxLine uint8, batch uint8) {
		m := int(maxLine%64) + 1
		sizes := make([]int, len(chunks))
		for i, c := range chunks {
			sizes[i] = int(c%97) + 1
		}
		// A buffer from max+2 bytes up: the smallest exercises every
		// compaction and growth path.
		bufSize := m + 2 + int(batch/9)%8
		got, pending, _ := runFramer(t, &chunkReader{r: bytes.NewReader(data), sizes: sizes}, m, int(batch%9)+1, bufSize, 0, false)
		want, wantPending := refFrame(data, m)
		if !slices.Equal(got, want) {
			t.Fatalf("max %d chunks %v\n got %+v\nwant %+v", m, sizes, got, want)
		}
		if pending != wantPending {
			t.Fatalf("pending %d, want %d", pending, wantPending)
		}
	})
}
