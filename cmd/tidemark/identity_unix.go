//go:build unix

package main

import (
	"io/fs"
	"syscall"

	"github.com/tidemark-go/tidemark"
)

// fileIdentity returns the device and inode of fi, as the file source
// records them (feed's fileIdentity, unexported).
func fileIdentity(fi fs.FileInfo) (tidemark.Identity, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st == nil {
		return tidemark.Identity{}, false
	}
	return tidemark.Identity{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}, true //nolint:unconvert // Dev is int32 on some platforms
}
