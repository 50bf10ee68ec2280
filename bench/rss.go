package bench

import (
	"os"
	"strconv"
	"strings"
)

// PeakRSSKiB returns this process's peak resident set size in KiB, the
// VmHWM line of /proc/self/status, or 0 where there is none. Unlike the
// ru_maxrss a parent gets from wait4, it does not include the parent's
// resident set at the fork.
func PeakRSSKiB() int64 {
	m, _ := ReadMemStatus("/proc/self/status")
	return m.HWM
}

// RSSParts returns the current anonymous and file-backed resident set of
// this process in KiB (RssAnon and RssFile of /proc/self/status): the
// file-backed part is mostly the program's own code.
func RSSParts() (anon, file int64) {
	m, _ := ReadMemStatus("/proc/self/status")
	return m.Anon, m.File
}

// MemStatus is what a process's status file (/proc/PID/status) says of its
// memory, in KiB.
type MemStatus struct {
	Anon, File int64 // RssAnon, RssFile: resident now
	HWM        int64 // VmHWM: the peak resident set
}

// ReadMemStatus reads a status file of /proc; ok is false when it has no
// VmHWM (the process is gone, or the system has none).
func ReadMemStatus(path string) (m MemStatus, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return m, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "RssAnon":
			m.Anon = n
		case "RssFile":
			m.File = n
		case "VmHWM":
			m.HWM = n
		}
	}
	return m, m.HWM > 0
}
