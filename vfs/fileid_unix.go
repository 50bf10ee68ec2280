//go:build unix

package vfs

import (
	"io/fs"
	"syscall"
)

// FileID returns the device and inode of fi (from a Stat of this package's
// file system or of the operating system), and whether the platform gives
// them: a file's identity, which a rename keeps and a copy does not.
func FileID(fi fs.FileInfo) (dev, ino uint64, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st == nil {
		return 0, 0, false
	}
	return uint64(st.Dev), uint64(st.Ino), true //nolint:unconvert // Dev is int32 on some platforms
}

// Links returns the number of names (hard links) of the file fi describes,
// and whether the platform tells. A file still open after it was removed,
// or after another file was renamed over its name, has none; a file
// renamed has one still.
func Links(fi fs.FileInfo) (uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st == nil {
		return 0, false
	}
	return uint64(st.Nlink), true //nolint:unconvert // Nlink is uint32 on some platforms
}
