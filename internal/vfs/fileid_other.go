//go:build !unix

package vfs

import "io/fs"

// FileID reports that this platform gives no file identity.
func FileID(fs.FileInfo) (dev, ino uint64, ok bool) { return 0, 0, false }
