// Package vfs is the former home of package
// github.com/tidemark-go/tidemark/vfs, kept while branches that import it
// land: every name here is that package's. Import the public package.
package vfs

import (
	"io/fs"

	"github.com/tidemark-go/tidemark/vfs"
)

// The types of package vfs.
type (
	FS          = vfs.FS
	File        = vfs.File
	Op          = vfs.Op
	Injector    = vfs.Injector
	Counter     = vfs.Counter
	LockedError = vfs.LockedError
)

// The operations of package vfs.
const (
	OpOpen     = vfs.OpOpen
	OpRead     = vfs.OpRead
	OpWrite    = vfs.OpWrite
	OpSync     = vfs.OpSync
	OpTruncate = vfs.OpTruncate
	OpRename   = vfs.OpRename
	OpRemove   = vfs.OpRemove
	OpStat     = vfs.OpStat
	OpMkdir    = vfs.OpMkdir
	OpSyncDir  = vfs.OpSyncDir
	OpLock     = vfs.OpLock
)

// The errors of package vfs.
var (
	ErrInjected = vfs.ErrInjected
	ErrNoSpace  = vfs.ErrNoSpace
	ErrLocked   = vfs.ErrLocked
)

// Default is vfs.Default.
func Default() FS { return vfs.Default() }

// Inject is vfs.Inject.
func Inject(fsys FS, inj Injector) FS { return vfs.Inject(fsys, inj) }

// FileID is vfs.FileID.
func FileID(fi fs.FileInfo) (dev, ino uint64, ok bool) { return vfs.FileID(fi) }

// Links is vfs.Links.
func Links(fi fs.FileInfo) (uint64, bool) { return vfs.Links(fi) }

// RenameDurable is vfs.RenameDurable.
func RenameDurable(fsys FS, oldname, newname string) error {
	return vfs.RenameDurable(fsys, oldname, newname)
}
