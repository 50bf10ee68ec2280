package vfs

import (
	"bufio"
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// procLocks is the kernel's table of file locks; a variable for tests.
var procLocks = "/proc/locks"

// lockHolder returns the process that holds the flock of f's file, from
// /proc/locks, or 0 when it cannot tell.
func lockHolder(f *os.File) int {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0
	}
	data, err := os.ReadFile(procLocks)
	if err != nil {
		return 0
	}
	return flockHolder(data, uint64(unix.Major(uint64(st.Dev))), uint64(unix.Minor(uint64(st.Dev))), uint64(st.Ino)) //nolint:unconvert // Dev's type differs between platforms
}

// flockHolder finds, in the lines of /proc/locks, the process holding a
// FLOCK lock on the file of device major:minor and inode ino. A line reads
//
//	1: FLOCK  ADVISORY  WRITE 16512 fe:00:9995693 0 EOF
//
// (the device in hexadecimal); a waiter's line has "->" after the number
// and holds nothing. It returns 0 when no line matches.
func flockHolder(data []byte, major, minor, ino uint64) int {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 6 || string(f[1]) != "FLOCK" {
			continue // a waiter ("->"), or another kind of lock
		}
		id := bytes.Split(f[5], []byte(":"))
		if len(id) != 3 {
			continue
		}
		ma, err1 := strconv.ParseUint(string(id[0]), 16, 32)
		mi, err2 := strconv.ParseUint(string(id[1]), 16, 32)
		in, err3 := strconv.ParseUint(string(id[2]), 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || ma != major || mi != minor || in != ino {
			continue
		}
		if pid, err := strconv.Atoi(string(f[4])); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}
