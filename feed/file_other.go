//go:build !unix

package feed

import (
	"io/fs"

	"github.com/tidemark-go/tidemark/dedupe"
)

// fileIdentity reports that this platform gives no file identity: only the
// fingerprint, the tail hash and the size decide whether a file changed.
func fileIdentity(fs.FileInfo) (dedupe.Identity, bool) { return dedupe.Identity{}, false }
