//go:build !unix

package main

import (
	"io/fs"

	"github.com/tidemark-go/tidemark"
)

// fileIdentity reports that this platform gives no file identity, as the
// file source does.
func fileIdentity(fs.FileInfo) (tidemark.Identity, bool) { return tidemark.Identity{}, false }
