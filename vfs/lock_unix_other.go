//go:build unix && !linux

package vfs

import "os"

// lockHolder cannot tell the holder of a lock on this platform.
func lockHolder(*os.File) int { return 0 }
