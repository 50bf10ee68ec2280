package vfs

import (
	"io/fs"
	"sync"
	"syscall"
)

// Op names a file system operation that an [Injector] can fail.
type Op string

// The operations that can be failed.
const (
	OpOpen     Op = "open"
	OpRead     Op = "read"
	OpWrite    Op = "write"
	OpSync     Op = "sync"
	OpTruncate Op = "truncate"
	OpRename   Op = "rename"
	OpRemove   Op = "remove"
	OpStat     Op = "stat"
	OpMkdir    Op = "mkdir"
	OpSyncDir  Op = "syncdir"
	OpLock     Op = "lock"
)

// ErrInjected is the error returned by operations failed with [FailWith]'s
// default. It wraps EIO so that callers see an I/O error.
var ErrInjected = &fs.PathError{Op: "injected", Path: "", Err: syscall.EIO}

// ErrNoSpace is a full disk, for injection.
var ErrNoSpace = syscall.ENOSPC

// Injector decides whether an operation on a path fails. It returns nil to let
// the operation run.
type Injector func(op Op, path string) error

// Inject wraps fsys so that every operation first asks inj, and fails with
// its error when it returns one. A write that fails writes nothing.
func Inject(fsys FS, inj Injector) FS { return &injectFS{fs: fsys, inj: inj} }

// Counter is an [Injector] that fails the n-th matching operation (counting
// from 1) and every later one when Sticky is set. It is safe for concurrent
// use. The zero value fails nothing.
type Counter struct {
	mu sync.Mutex
	// Match selects the operations that count. Nil counts every operation.
	Match func(op Op, path string) bool
	// FailAt is the matching operation that fails first; 0 fails none.
	FailAt int
	// Sticky makes every matching operation after FailAt fail as well.
	Sticky bool
	// Err is the error returned; nil means ErrInjected.
	Err error
	n   int
}

// Injector returns the counter as an [Injector].
func (c *Counter) Injector() Injector {
	return func(op Op, path string) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.Match != nil && !c.Match(op, path) {
			return nil
		}
		c.n++
		if c.FailAt == 0 || c.n < c.FailAt || (c.n > c.FailAt && !c.Sticky) {
			return nil
		}
		if c.Err != nil {
			return c.Err
		}
		return ErrInjected
	}
}

// Count returns how many matching operations have been seen.
func (c *Counter) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

type injectFS struct {
	fs  FS
	inj Injector
}

func (f *injectFS) check(op Op, path string) error {
	if err := f.inj(op, path); err != nil {
		return &fs.PathError{Op: string(op), Path: path, Err: err}
	}
	return nil
}

func (f *injectFS) Open(name string) (File, error) {
	if err := f.check(OpOpen, name); err != nil {
		return nil, err
	}
	file, err := f.fs.Open(name)
	if err != nil {
		return nil, err
	}
	return &injectFile{File: file, fs: f}, nil
}

func (f *injectFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	if err := f.check(OpOpen, name); err != nil {
		return nil, err
	}
	file, err := f.fs.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &injectFile{File: file, fs: f}, nil
}

func (f *injectFS) Stat(name string) (fs.FileInfo, error) {
	if err := f.check(OpStat, name); err != nil {
		return nil, err
	}
	return f.fs.Stat(name)
}

func (f *injectFS) Rename(oldname, newname string) error {
	if err := f.check(OpRename, newname); err != nil {
		return err
	}
	return f.fs.Rename(oldname, newname)
}

func (f *injectFS) Remove(name string) error {
	if err := f.check(OpRemove, name); err != nil {
		return err
	}
	return f.fs.Remove(name)
}

func (f *injectFS) MkdirAll(name string, perm fs.FileMode) error {
	if err := f.check(OpMkdir, name); err != nil {
		return err
	}
	return f.fs.MkdirAll(name, perm)
}

func (f *injectFS) SyncDir(dir string) error {
	if err := f.check(OpSyncDir, dir); err != nil {
		return err
	}
	return f.fs.SyncDir(dir)
}

type injectFile struct {
	File
	fs *injectFS
}

func (f *injectFile) Read(p []byte) (int, error) {
	if err := f.fs.check(OpRead, f.Name()); err != nil {
		return 0, err
	}
	return f.File.Read(p)
}

func (f *injectFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(OpRead, f.Name()); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *injectFile) Write(p []byte) (int, error) {
	if err := f.fs.check(OpWrite, f.Name()); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *injectFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(OpWrite, f.Name()); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *injectFile) Sync() error {
	if err := f.fs.check(OpSync, f.Name()); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *injectFile) Datasync() error {
	if err := f.fs.check(OpSync, f.Name()); err != nil {
		return err
	}
	return f.File.Datasync()
}

func (f *injectFile) Truncate(size int64) error {
	if err := f.fs.check(OpTruncate, f.Name()); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f *injectFile) Lock() error {
	if err := f.fs.check(OpLock, f.Name()); err != nil {
		return err
	}
	return f.File.Lock()
}
