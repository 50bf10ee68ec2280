package pointer

import (
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/tidemark-go/tidemark/vfs"
)

// crashFS is an in-memory vfs.FS that remembers what was made durable, so a
// test can simulate a power loss with crash: a file keeps the bytes of its
// last Sync or Datasync, every byte written since may or may not have
// reached the disk, and a directory entry created, renamed or removed since
// the directory's last SyncDir may or may not have.
type crashFS struct {
	mu      sync.Mutex
	names   map[string]*memFile // the namespace as the process sees it
	durable map[string]*memFile // the namespace as of the last SyncDir
	locks   map[*memFile]*memHandle
}

type memFile struct {
	data   []byte // as the process sees it
	synced []byte // as on disk after the last sync
}

func newCrashFS() *crashFS {
	return &crashFS{names: map[string]*memFile{}, durable: map[string]*memFile{}, locks: map[*memFile]*memHandle{}}
}

// crash returns the file system as a power loss at this moment could leave
// it; rng decides every byte and entry that was not made durable.
func (c *crashFS) crash(rng *rand.Rand) *crashFS {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := newCrashFS()
	seen := map[*memFile]*memFile{}
	survive := func(f *memFile) *memFile {
		if g, ok := seen[f]; ok {
			return g
		}
		n := len(f.synced)
		if len(f.data) != n && rng.IntN(2) == 0 {
			n = len(f.data)
		}
		b := make([]byte, n)
		for i := range b {
			inData, inSynced := i < len(f.data), i < len(f.synced)
			switch {
			case inData && inSynced && f.data[i] != f.synced[i] && rng.IntN(2) == 0:
				b[i] = f.data[i]
			case inSynced:
				b[i] = f.synced[i]
			case inData:
				b[i] = f.data[i]
			}
		}
		g := &memFile{data: b, synced: append([]byte(nil), b...)}
		seen[f] = g
		return g
	}
	for _, name := range c.allNames() {
		cur, dur := c.names[name], c.durable[name]
		pick := dur
		if cur != dur && rng.IntN(2) == 0 {
			pick = cur
		}
		if pick != nil {
			g := survive(pick)
			out.names[name], out.durable[name] = g, g
		}
	}
	return out
}

func (c *crashFS) allNames() []string {
	set := map[string]bool{}
	for n := range c.names {
		set[n] = true
	}
	for n := range c.durable {
		set[n] = true
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names) // the rng's choices must not depend on map order
	return names
}

// put sets a file's content, durably.
func (c *crashFS) put(name string, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := &memFile{data: append([]byte(nil), b...), synced: append([]byte(nil), b...)}
	c.names[name], c.durable[name] = f, f
}

// get returns a file's content as the process sees it.
func (c *crashFS) get(name string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.names[name]
	if !ok {
		return nil, false
	}
	return append([]byte(nil), f.data...), true
}

func (c *crashFS) Open(name string) (vfs.File, error) { return c.OpenFile(name, os.O_RDONLY, 0) }

func (c *crashFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.names[name]
	switch {
	case ok && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrExist}
	case !ok && flag&os.O_CREATE == 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	case !ok:
		f = &memFile{}
		c.names[name] = f
	}
	if flag&os.O_TRUNC != 0 {
		f.data = f.data[:0]
	}
	return &memHandle{fs: c, f: f, name: name, writable: flag&(os.O_RDWR|os.O_WRONLY) != 0}, nil
}

func (c *crashFS) Stat(name string) (fs.FileInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.names[name]
	if !ok {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return memInfo{name: filepath.Base(name), size: int64(len(f.data))}, nil
}

func (c *crashFS) Rename(oldname, newname string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.names[oldname]
	if !ok {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	c.names[newname] = f
	delete(c.names, oldname)
	return nil
}

func (c *crashFS) Remove(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.names[name]; !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(c.names, name)
	return nil
}

func (c *crashFS) MkdirAll(string, fs.FileMode) error { return nil }

func (c *crashFS) SyncDir(dir string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for n := range c.durable {
		if filepath.Dir(n) == dir {
			delete(c.durable, n)
		}
	}
	for n, f := range c.names {
		if filepath.Dir(n) == dir {
			c.durable[n] = f
		}
	}
	return nil
}

type memHandle struct {
	fs       *crashFS
	f        *memFile
	name     string
	off      int64
	writable bool
	closed   bool
}

func (h *memHandle) check(write bool) error {
	if h.closed {
		return &fs.PathError{Op: "use", Path: h.name, Err: fs.ErrClosed}
	}
	if write && !h.writable {
		return &fs.PathError{Op: "write", Path: h.name, Err: fs.ErrPermission}
	}
	return nil
}

func (h *memHandle) Read(p []byte) (int, error) {
	n, err := h.ReadAt(p, h.off)
	h.off += int64(n)
	return n, err
}

func (h *memHandle) ReadAt(p []byte, off int64) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check(false); err != nil {
		return 0, err
	}
	if off >= int64(len(h.f.data)) {
		return 0, io.EOF
	}
	n := copy(p, h.f.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (h *memHandle) Write(p []byte) (int, error) {
	n, err := h.WriteAt(p, h.off)
	h.off += int64(n)
	return n, err
}

func (h *memHandle) WriteAt(p []byte, off int64) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check(true); err != nil {
		return 0, err
	}
	if end := off + int64(len(p)); end > int64(len(h.f.data)) {
		h.f.data = append(h.f.data, make([]byte, end-int64(len(h.f.data)))...)
	}
	return copy(h.f.data[off:], p), nil
}

func (h *memHandle) Seek(offset int64, whence int) (int64, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	switch whence {
	case io.SeekCurrent:
		offset += h.off
	case io.SeekEnd:
		offset += int64(len(h.f.data))
	}
	h.off = offset
	return offset, nil
}

func (h *memHandle) Close() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check(false); err != nil {
		return err
	}
	h.closed = true
	if h.fs.locks[h.f] == h {
		delete(h.fs.locks, h.f)
	}
	return nil
}

// Lock is flock's: one open handle of a file holds it, Close releases it.
func (h *memHandle) Lock() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check(false); err != nil {
		return err
	}
	if o, ok := h.fs.locks[h.f]; ok && o != h {
		return &vfs.LockedError{Path: h.name}
	}
	h.fs.locks[h.f] = h
	return nil
}

func (h *memHandle) Name() string { return h.name }

func (h *memHandle) Stat() (fs.FileInfo, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	return memInfo{name: filepath.Base(h.name), size: int64(len(h.f.data))}, nil
}

func (h *memHandle) Sync() error { return h.Datasync() }

func (h *memHandle) Datasync() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check(false); err != nil {
		return err
	}
	h.f.synced = append(h.f.synced[:0:0], h.f.data...)
	return nil
}

func (h *memHandle) Truncate(size int64) error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check(true); err != nil {
		return err
	}
	if size <= int64(len(h.f.data)) {
		h.f.data = h.f.data[:size]
	} else {
		h.f.data = append(h.f.data, make([]byte, size-int64(len(h.f.data)))...)
	}
	return nil
}

type memInfo struct {
	name string
	size int64
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) Mode() fs.FileMode  { return 0o644 }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return false }
func (i memInfo) Sys() any           { return nil }
