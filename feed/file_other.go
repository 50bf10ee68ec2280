//go:build !unix

package feed

import (
	"io/fs"

	"github.com/tidemark-go/tidemark/dedupe"
)

// fileIdentity reports that this platform gives no file identity: only the
// fingerprint, the tail hash and the size decide whether a file changed.
func fileIdentity(fs.FileInfo) (dedupe.Identity, bool) { return dedupe.Identity{}, false }

// openNonblock is 0 where FIFOs do not block an open as on Unix: the stat
// before the open and the fstat after it still refuse anything but a
// regular file.
const openNonblock = 0
