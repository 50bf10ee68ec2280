package torture

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// powerFS is an in-memory FUSE file system that can lose power. It keeps,
// for every file, the bytes written (what programs read) and the bytes at
// its last fsync or fdatasync (what survives a power cut). Its durability
// model is ext4-like but stricter about data:
//
//   - a file's data (and size) survives a power cut only as of the file's
//     last fsync/fdatasync;
//   - the namespace (creations, renames, removals, in every folder) is a
//     journal: any fsync, of a file or a folder, makes every namespace
//     change made so far durable;
//   - a power cut rebuilds the tree from the durable namespace, each file
//     with its durable bytes (a file named there but never synced is empty)
//     and its inode number.
//
// Mount it with mountPowerFS; cut power with (*powerMount).cut. The test
// process must reach the mount through system calls only, never through a
// memory map: a page fault on a file the same process serves can deadlock
// with the garbage collector.
type powerFS struct {
	mu sync.Mutex
	// durable is the namespace as of the last fsync: path -> file (nil for
	// a folder).
	durable map[string]*pfile
	// dirIno holds the inode numbers of the durable folders.
	dirIno map[string]uint64
	ino    atomic.Uint64
	root   *pdir
	syncs  atomic.Int64
}

type pfile struct {
	fs.Inode
	p      *powerFS
	ino    uint64 // kept across power cuts, as a disk keeps it
	mu     sync.Mutex
	data   []byte
	synced []byte
}

type pdir struct {
	fs.Inode
	p *powerFS
	// initial children, added at mount (OnAdd of the root).
	initial map[string]*pfile
	dirs    []string
	dirIno  map[string]uint64
}

var (
	_ fs.NodeOpener    = (*pfile)(nil)
	_ fs.NodeReader    = (*pfile)(nil)
	_ fs.NodeWriter    = (*pfile)(nil)
	_ fs.NodeFsyncer   = (*pfile)(nil)
	_ fs.NodeGetattrer = (*pfile)(nil)
	_ fs.NodeSetattrer = (*pfile)(nil)
	_ fs.NodeFlusher   = (*pfile)(nil)
	_ fs.NodeAllocater = (*pfile)(nil)
	_ fs.NodeCreater   = (*pdir)(nil)
	_ fs.NodeMkdirer   = (*pdir)(nil)
	_ fs.NodeUnlinker  = (*pdir)(nil)
	_ fs.NodeRmdirer   = (*pdir)(nil)
	_ fs.NodeRenamer   = (*pdir)(nil)
	_ fs.NodeFsyncer   = (*pdir)(nil)
	_ fs.NodeGetattrer = (*pdir)(nil)
	_ fs.NodeOnAdder   = (*pdir)(nil)
	_ fs.NodeStatfser  = (*pdir)(nil)
)

func (f *pfile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_TRUNC != 0 {
		f.mu.Lock()
		f.data = f.data[:0]
		f.mu.Unlock()
	}
	return nil, 0, 0
}

func (f *pfile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if off >= int64(len(f.data)) {
		return fuse.ReadResultData(nil), 0
	}
	n := copy(dest, f.data[off:])
	return fuse.ReadResultData(dest[:n]), 0
}

func (f *pfile) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if end := off + int64(len(data)); end > int64(len(f.data)) {
		f.data = slices.Grow(f.data, int(end)-len(f.data))[:end]
	}
	copy(f.data[off:], data)
	return uint32(len(data)), 0
}

func (f *pfile) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	f.mu.Lock()
	f.synced = bytes.Clone(f.data)
	f.mu.Unlock()
	f.p.journal()
	return 0
}

func (f *pfile) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno { return 0 }

func (f *pfile) Allocate(ctx context.Context, fh fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	const keepSize = 1 // FALLOC_FL_KEEP_SIZE
	if mode&keepSize != 0 {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if end := int(off + size); end > len(f.data) {
		f.data = append(f.data, make([]byte, end-len(f.data))...)
	}
	return 0
}

func (f *pfile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	out.Mode = syscall.S_IFREG | 0o644
	out.Size = uint64(len(f.data))
	out.Blocks = (out.Size + 511) / 512
	out.Nlink = 1
	out.Ino = f.StableAttr().Ino
	return 0
}

func (f *pfile) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok {
		f.mu.Lock()
		if int(sz) <= len(f.data) {
			f.data = f.data[:sz]
		} else {
			f.data = append(f.data, make([]byte, int(sz)-len(f.data))...)
		}
		f.mu.Unlock()
	}
	return f.Getattr(ctx, fh, out)
}

func (d *pdir) OnAdd(ctx context.Context) {
	// Rebuild the tree a power cut left: folders first, then files.
	for _, dir := range d.dirs {
		parent := &d.Inode
		parts := strings.Split(dir, "/")
		for i, name := range parts {
			ch := parent.GetChild(name)
			if ch == nil {
				ino := d.dirIno[strings.Join(parts[:i+1], "/")]
				if ino == 0 {
					ino = d.p.ino.Add(1)
				}
				ch = parent.NewPersistentInode(ctx, &pdir{p: d.p}, fs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino})
				parent.AddChild(name, ch, false)
			}
			parent = ch
		}
	}
	for p, f := range d.initial {
		parent := &d.Inode
		dir, name := path.Split(p)
		for _, n := range strings.Split(strings.Trim(dir, "/"), "/") {
			if n != "" {
				parent = parent.GetChild(n)
			}
		}
		ch := parent.NewPersistentInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG, Ino: f.ino})
		parent.AddChild(name, ch, false)
	}
}

func (d *pdir) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	f := &pfile{p: d.p, ino: d.p.ino.Add(1)}
	ch := d.NewPersistentInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG, Ino: f.ino})
	f.Getattr(ctx, nil, &fuse.AttrOut{Attr: out.Attr})
	out.Mode = syscall.S_IFREG | 0o644
	out.Ino = ch.StableAttr().Ino
	return ch, nil, 0, 0
}

func (d *pdir) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch := d.NewPersistentInode(ctx, &pdir{p: d.p}, fs.StableAttr{Mode: syscall.S_IFDIR, Ino: d.p.ino.Add(1)})
	out.Mode = syscall.S_IFDIR | 0o755
	out.Ino = ch.StableAttr().Ino
	return ch, 0
}

func (d *pdir) Unlink(ctx context.Context, name string) syscall.Errno { return 0 }

func (d *pdir) Rmdir(ctx context.Context, name string) syscall.Errno {
	if ch := d.GetChild(name); ch != nil && len(ch.Children()) > 0 {
		return syscall.ENOTEMPTY
	}
	return 0
}

func (d *pdir) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if flags != 0 {
		return syscall.EINVAL
	}
	return 0
}

func (d *pdir) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	d.p.journal()
	return 0
}

func (d *pdir) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o755
	out.Nlink = 2
	out.Ino = d.StableAttr().Ino
	return 0
}

func (d *pdir) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	out.Bsize = 4096
	out.Frsize = 4096
	out.Blocks = 1 << 24
	out.Bfree = 1 << 23
	out.Bavail = 1 << 23
	out.Files = 1 << 20
	out.Ffree = 1 << 19
	out.NameLen = 255
	return 0
}

// journal makes the namespace as it is now durable (any fsync commits it).
func (p *powerFS) journal() {
	p.syncs.Add(1)
	ns := make(map[string]*pfile)
	dirIno := make(map[string]uint64)
	var walk func(prefix string, n *fs.Inode)
	walk = func(prefix string, n *fs.Inode) {
		for name, ch := range n.Children() {
			pth := name
			if prefix != "" {
				pth = prefix + "/" + name
			}
			switch op := ch.Operations().(type) {
			case *pfile:
				ns[pth] = op
			case *pdir:
				ns[pth] = nil
				dirIno[pth] = ch.StableAttr().Ino
				walk(pth, ch)
			}
		}
	}
	walk("", &p.root.Inode)
	p.mu.Lock()
	p.durable, p.dirIno = ns, dirIno
	p.mu.Unlock()
}

// powerMount is a mounted powerFS.
type powerMount struct {
	t   *testing.T
	dir string
	fs  *powerFS
	srv *fuse.Server
}

// mountPowerFS mounts an empty powerFS at dir. Where FUSE is unavailable it
// fails the test in CI (CI=true) and logs loudly elsewhere, returning nil.
func mountPowerFS(t *testing.T, dir string) *powerMount {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m := &powerMount{t: t, dir: dir}
	if err := m.mount(nil, nil); err != nil {
		msg := fmt.Sprintf("POWER LOSS NOT TESTED: cannot mount the FUSE power-loss file system at %s: %v (needs /dev/fuse and root)", dir, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Log("!!!!!!!! " + msg + " !!!!!!!!")
		return nil
	}
	t.Cleanup(func() {
		if m.srv != nil {
			m.unmount()
		}
	})
	return m
}

func (m *powerMount) mount(durable map[string]*pfile, dirIno map[string]uint64) error {
	p := &powerFS{}
	root := &pdir{p: p, initial: make(map[string]*pfile), dirIno: dirIno}
	p.root = root
	maxIno := uint64(1) // the root's
	for _, ino := range dirIno {
		maxIno = max(maxIno, ino)
	}
	for pth, f := range durable {
		if f == nil {
			root.dirs = append(root.dirs, pth)
			continue
		}
		f.mu.Lock()
		b := bytes.Clone(f.synced)
		f.mu.Unlock()
		root.initial[pth] = &pfile{p: p, ino: f.ino, data: b, synced: bytes.Clone(b)}
		maxIno = max(maxIno, f.ino)
	}
	p.ino.Store(maxIno)
	sort.Slice(root.dirs, func(i, j int) bool { return strings.Count(root.dirs[i], "/") < strings.Count(root.dirs[j], "/") })
	zero := time.Duration(0)
	srv, err := fs.Mount(m.dir, root, &fs.Options{
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			FsName:            "tidemark-powercut",
			Name:              "powercut",
			DirectMountStrict: true,
			MaxWrite:          1 << 20,
		},
	})
	if err != nil {
		return err
	}
	p.journal() // the rebuilt tree is what the disk holds
	m.fs, m.srv = p, srv
	return nil
}

func (m *powerMount) unmount() {
	m.t.Helper()
	var err error
	for range 100 {
		if err = m.srv.Unmount(); err == nil {
			m.srv.Wait()
			m.srv = nil
			return
		}
		// A process that still has a file open (the killed child's exit
		// is reaped, but the kernel may release its files a moment
		// later): retry.
		time.Sleep(20 * time.Millisecond)
	}
	m.t.Fatalf("unmount %s: %v", m.dir, err)
}

// cut loses power: the mount is torn down and rebuilt from what was
// durable. No process may run on it.
func (m *powerMount) cut() {
	m.t.Helper()
	m.fs.mu.Lock()
	durable, dirIno := m.fs.durable, m.fs.dirIno
	m.fs.mu.Unlock()
	m.unmount()
	if err := m.mount(durable, dirIno); err != nil {
		m.t.Fatalf("remount after the power cut: %v", err)
	}
	figures.powerCuts.Add(1)
}
