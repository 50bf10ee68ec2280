package state

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockHolderPID finds the process holding an flock on f's file in
// /proc/locks, whose lines read
//
//	2: FLOCK  ADVISORY  WRITE 27609 fe:00:9978192 0 EOF
//
// (the device as major:minor in hex, then the inode). A waiter's line has
// "->" after the number and is skipped.
func lockHolderPID(f *os.File) (int, bool) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, false
	}
	locks, err := os.Open("/proc/locks")
	if err != nil {
		return 0, false
	}
	defer locks.Close()
	major, minor := unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev))
	sc := bufio.NewScanner(locks)
	pid, byIno := 0, 0
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[1] != "FLOCK" {
			continue
		}
		id := strings.Split(fs[5], ":")
		if len(id) != 3 {
			continue
		}
		ino, err1 := strconv.ParseUint(id[2], 10, 64)
		maj, err2 := strconv.ParseUint(id[0], 16, 32)
		min, err3 := strconv.ParseUint(id[1], 16, 32)
		p, err4 := strconv.Atoi(fs[4])
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil || ino != st.Ino {
			continue
		}
		if uint32(maj) == major && uint32(min) == minor {
			return p, true
		}
		// On an overlay file system the lock is on the upper file,
		// whose device is not the one stat reports: the inode alone
		// decides when it names one lock only.
		pid, byIno = p, byIno+1
	}
	return pid, byIno == 1
}
