package bench

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// PeakRSSKiB returns this process's peak resident set size in KiB, the
// VmHWM line of /proc/self/status, or 0 where there is none. Unlike the
// ru_maxrss a parent gets from wait4, it does not include the parent's
// resident set at the fork.
func PeakRSSKiB() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return n
		}
	}
	return 0
}

// RSSParts returns the current anonymous and file-backed resident set of
// this process in KiB (RssAnon and RssFile of /proc/self/status): the
// file-backed part is mostly the program's own code.
func RSSParts() (anon, file int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
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
			anon = n
		case "RssFile":
			file = n
		}
	}
	return anon, file
}
