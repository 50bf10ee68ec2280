// Package vfs is the small file system interface through which tidemark does
// every file operation that a test must be able to make fail: create, write,
// sync, rename, truncate and remove. Production code uses [Default], which is
// the operating system; tests wrap it with [Inject] to fail chosen operations.
//
// Most programs never use it: a nil FS in feed.Config and state.Options
// means [Default]. It is exported for two kinds of user: a program that runs
// tidemark on a file system of its own (implement [FS] and [File]), and a
// test of a program built on tidemark that wants to see what a full disk, a
// failed sync or a failed rename does to it ([Inject], with the [Op] to
// fail; [ErrInjected] and [ErrNoSpace] are the errors to inject):
//
//	fsys := vfs.Inject(vfs.Default(), func(op vfs.Op, path string) error {
//		if op == vfs.OpSync && filepath.Base(path) == "output.csv" {
//			return vfs.ErrNoSpace // the store's next commit fails
//		}
//		return nil
//	})
//	st, err := state.Open("bbolt:data", &state.Options{FS: fsys})
//
// Only the operations tidemark needs are here. Reads of the input file go
// through the same interface so that a test can also fail them, and so
// does the lock that makes one writer per pointer file ([File.Lock]).
// The bbolt and Pebble files of a store are not: those backends do their
// own I/O (the store's STORE file, lock and output files are).
package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
)

// File is an open file.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.WriterAt
	io.Seeker
	io.Closer
	// Name returns the name the file was opened with.
	Name() string
	// Stat returns the file's information, including its identity.
	Stat() (fs.FileInfo, error)
	// Sync makes the file's contents and metadata durable (fsync).
	Sync() error
	// Datasync makes the file's contents durable, and its metadata only as
	// far as needed to read them back (fdatasync where the platform has it,
	// else fsync).
	Datasync() error
	// Truncate changes the size of the file.
	Truncate(size int64) error
	// Lock takes an exclusive advisory lock on the file without waiting
	// (flock with LOCK_EX|LOCK_NB on Unix; LockFileEx on a byte range
	// beyond any data on Windows). The lock belongs to this open file: a
	// second open of the same file, in this process or another, cannot
	// take it while this one holds it, and Close releases it (so does the
	// process's death). Taking it again on the same open file succeeds.
	// When another open file holds it, the error wraps [ErrLocked] and is
	// a [*LockedError] naming the holder where the platform tells it. Where
	// the platform has no such locks the error wraps errors.ErrUnsupported.
	Lock() error
}

// ErrLocked is wrapped by the error of [File.Lock] when another open file
// holds the lock.
var ErrLocked = errors.New("vfs: file is locked")

// LockedError is the error of [File.Lock] when another open file holds
// the lock.
type LockedError struct {
	// Path is the locked file's name.
	Path string
	// PID is the process that holds the lock, 0 when the platform does not
	// tell (Linux tells it through /proc/locks).
	PID int
}

// Holder describes the holder: "process 1234", "process 1234 (this
// process)", or "another process" when it is not known.
func (e *LockedError) Holder() string {
	switch {
	case e.PID <= 0:
		return "another process"
	case e.PID == os.Getpid():
		return fmt.Sprintf("process %d (this process)", e.PID)
	}
	return fmt.Sprintf("process %d", e.PID)
}

func (e *LockedError) Error() string { return e.Path + " is held by " + e.Holder() }

// Unwrap returns ErrLocked.
func (e *LockedError) Unwrap() error { return ErrLocked }

// FS is a file system.
type FS interface {
	// Open opens a file for reading.
	Open(name string) (File, error)
	// OpenFile opens a file with the given flags (os.O_*) and permissions.
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	// Stat describes the named file.
	Stat(name string) (fs.FileInfo, error)
	// Rename renames oldname to newname, replacing newname if it exists.
	Rename(oldname, newname string) error
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// MkdirAll creates a directory and its parents.
	MkdirAll(name string, perm fs.FileMode) error
	// SyncDir makes the directory's entries (creations, renames, removals)
	// durable.
	SyncDir(dir string) error
}

// Default returns the operating system's file system.
func Default() FS { return osFS{} }

type osFS struct{}

func (osFS) Open(name string) (File, error) { return wrap(os.Open(name)) }
func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	return wrap(os.OpenFile(name, flag, perm))
}

// osFile is a file of the operating system's file system. locked is set
// once Lock took the file's lock: Close then releases it first.
type osFile struct {
	*os.File
	locked atomic.Bool
}

func wrap(f *os.File, err error) (File, error) {
	if err != nil {
		return nil, err
	}
	return &osFile{File: f}, nil
}
func (osFS) Stat(name string) (fs.FileInfo, error)        { return os.Stat(name) }
func (osFS) Rename(oldname, newname string) error         { return os.Rename(oldname, newname) }
func (osFS) Remove(name string) error                     { return os.Remove(name) }
func (osFS) MkdirAll(name string, perm fs.FileMode) error { return os.MkdirAll(name, perm) }
func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// RenameDurable renames oldname to newname and then syncs the directory of
// newname, so that the rename survives a power loss.
func RenameDurable(fsys FS, oldname, newname string) error {
	if err := fsys.Rename(oldname, newname); err != nil {
		return err
	}
	return fsys.SyncDir(filepath.Dir(newname))
}
