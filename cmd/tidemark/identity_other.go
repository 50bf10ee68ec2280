//go:build !unix

package main

import (
	"io/fs"

	"github.com/tidemark-go/tidemark/dedupe"
)

// fileIdentity reports that this platform gives no file identity, as the
// file source does.
func fileIdentity(fs.FileInfo) (dedupe.Identity, bool) { return dedupe.Identity{}, false }
