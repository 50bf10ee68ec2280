//go:build !unix

package state

import "io/fs"

// fileID reports no identity where the system gives none: a bbolt file is
// then never taken as left checked (see boltleft.go).
func fileID(fs.FileInfo) (dev, ino uint64, ok bool) { return 0, 0, false }
