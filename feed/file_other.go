//go:build !unix

package feed

// openNonblock is 0 where FIFOs do not block an open as on Unix: the stat
// before the open and the fstat after it still refuse anything but a
// regular file.
const openNonblock = 0
