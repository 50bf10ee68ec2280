package vfs

import (
	"bytes"
	"strconv"
	"testing"
)

// TestFlockHolder parses /proc/locks as the kernel writes it: waiters and
// other kinds of locks hold nothing, the device is hexadecimal.
func TestFlockHolder(t *testing.T) {
	data := []byte(`1: POSIX  ADVISORY  WRITE 111 fe:00:42 0 EOF
2: FLOCK  ADVISORY  WRITE 222 fe:01:42 0 EOF
3: -> FLOCK  ADVISORY  WRITE 333 fe:00:42 0 EOF
4: FLOCK  ADVISORY  WRITE 444 fe:00:42 0 EOF
5: FLOCK  ADVISORY  WRITE 555 103:1a:42 0 EOF
garbage
6: FLOCK  ADVISORY  WRITE -1 fe:00:77 0 EOF
`)
	for _, c := range []struct {
		major, minor, ino uint64
		want              int
	}{
		{0xfe, 0, 42, 444},
		{0xfe, 1, 42, 222},
		{0x103, 0x1a, 42, 555},
		{0xfe, 0, 43, 0},
		{0xfe, 0, 77, 0}, // a lock whose holder the kernel does not show
	} {
		if got := flockHolder(data, c.major, c.minor, c.ino); got != c.want {
			t.Errorf("%x:%x:%d: holder %d, want %d", c.major, c.minor, c.ino, got, c.want)
		}
	}
}

// FuzzFlockHolder: whatever /proc/locks holds, the parser does not panic,
// and a holder it returns is the process ID of a FLOCK line naming the
// file.
func FuzzFlockHolder(f *testing.F) {
	f.Add([]byte("1: FLOCK  ADVISORY  WRITE 444 fe:00:42 0 EOF\n"), uint64(0xfe), uint64(0), uint64(42))
	f.Add([]byte("1: -> FLOCK  ADVISORY  WRITE 333 fe:00:42 0 EOF\n2: POSIX  ADVISORY  WRITE 1 fe:00:42 0 EOF\n"), uint64(0xfe), uint64(0), uint64(42))
	f.Add([]byte("3: FLOCK ADVISORY WRITE 9 103:1a:7 0 EOF\nx\n\n: : :\n"), uint64(0x103), uint64(0x1a), uint64(7))
	f.Fuzz(func(t *testing.T, data []byte, major, minor, ino uint64) {
		pid := flockHolder(data, major, minor, ino)
		if pid < 0 {
			t.Fatalf("holder %d", pid)
		}
		if pid > 0 && !bytes.Contains(data, []byte(strconv.Itoa(pid))) {
			t.Fatalf("holder %d is not in the input", pid)
		}
	})
}
