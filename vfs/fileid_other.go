//go:build !unix

package vfs

import "io/fs"

// FileID reports that this platform gives no file identity.
func FileID(fs.FileInfo) (dev, ino uint64, ok bool) { return 0, 0, false }

// Links reports that this platform does not tell a file's links.
func Links(fs.FileInfo) (uint64, bool) { return 0, false }
