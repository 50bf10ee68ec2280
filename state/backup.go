package state

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tidemark-go/tidemark/vfs"
)

func (s *nsStore) Backup(ctx context.Context, dir string) error { return s.c.backup(ctx, dir) }

// ErrBackupExists is returned by [Store.Backup] when its folder exists and
// is not empty: a backup never writes over anything.
var ErrBackupExists = errors.New("state: the backup folder exists and is not empty")

// backup writes a consistent copy of the store into dir (see
// Store.Backup). The copy is made in a new folder beside dir and renamed
// to dir once complete and synced, so that dir is either absent or a
// whole store.
func (c *core) backup(ctx context.Context, dir string) (err error) {
	start := time.Now()
	fail := func(err error) error {
		return fmt.Errorf("backup of %s store %s into %s: %w", c.kind, c.dir, dir, err)
	}
	if dir == "" {
		return fail(errors.New("no folder given"))
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	dir = filepath.Clean(dir)
	if abs, err := filepath.Abs(dir); err == nil && !c.remote() {
		if own, err := filepath.Abs(c.dir); err == nil && (abs == own || strings.HasPrefix(abs, own+string(filepath.Separator))) {
			return fail(errors.New("the folder is the store's own, or inside it: choose a folder outside the store"))
		}
	}
	replace := false
	switch es, err := os.ReadDir(dir); {
	case err == nil && len(es) > 0:
		return fail(fmt.Errorf("%w: choose a new folder, or remove it", ErrBackupExists))
	case err == nil:
		replace = true // an empty folder: the copy takes its place
	case !errors.Is(err, fs.ErrNotExist):
		return fail(err)
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fail(err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return fail(err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fail(err)
	}

	if err := c.checkedFor(ctx, "a backup"); err != nil {
		return fail(err)
	}
	if err := c.outputsChecked(ctx, "a backup"); err != nil {
		return fail(err)
	}
	c.snapMu.RLock()
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		c.snapMu.RUnlock()
		return fail(ErrClosed)
	}
	kind, outs, err := c.eng.backup(ctx, tmp, nil)
	if err == nil && !c.remote() {
		err = c.copyOutputs(ctx, tmp, outs)
	}
	c.snapMu.RUnlock()
	if cerr := ctx.Err(); err != nil && cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w (%v)", cerr, err) // bbolt's WriteTo does not wrap it
	}
	if err != nil {
		return fail(err)
	}
	osfs := vfs.Default()
	if err := writeStoreFile(osfs, tmp, kind); err != nil {
		return fail(err)
	}
	if err := osfs.SyncDir(tmp); err != nil {
		return fail(err)
	}
	if replace {
		if err := os.Remove(dir); err != nil {
			return fail(err)
		}
	}
	if err := vfs.RenameDurable(osfs, tmp, dir); err != nil {
		return fail(err)
	}
	c.log.Info("state: backup written", "store", c.dir, "backend", c.kind, "backup", dir, "as", kind, "outputs", len(outs), "took", time.Since(start))
	return nil
}

// remote reports whether the store has no folder of its own (PostgreSQL):
// its outputs are rows of the backend, under the checksums.
func (c *core) remote() bool {
	_, ok := c.rawEngine().(interface{ outputsInEngine() })
	return ok
}

// checkCopy reads every key and value of r, the state a backup copies,
// and verifies each value with verify (nil for a store of format 1, whose
// values have no checksums), so that a backup of damaged data fails with
// the *CorruptError naming the record rather than make a copy that cannot
// be trusted. The backend's own checks run on the way: bbolt's pages are
// walked in the engine's guard, Pebble checks each block it reads.
func checkCopy(ctx context.Context, r reader, verify func(k, v []byte) ([]byte, error)) error {
	c := r.cursor(nil, nil, false)
	for i := 0; c.next(); i++ {
		if verify != nil {
			if _, err := verify(c.key(), c.value()); err != nil {
				return errors.Join(err, c.close())
			}
		}
		if i%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return errors.Join(err, c.close())
			}
		}
	}
	return c.close()
}

// copyOutputs copies the committed bytes of each output (outs, the
// lengths the copy of the backend records) into dir. The files are
// append-only up to their committed length, and a batch's bytes are
// written before its state commits, so each file holds at least that much.
func (c *core) copyOutputs(ctx context.Context, dir string, outs map[string]int64) error {
	for name, n := range outs {
		if !validOutputName(name) {
			return fmt.Errorf("output %q: %w", name, ErrCorrupt)
		}
		if err := c.copyOutput(ctx, filepath.Join(c.dir, name), filepath.Join(dir, name), n); err != nil {
			return err
		}
	}
	return nil
}

func (c *core) copyOutput(ctx context.Context, from, to string, n int64) error {
	src, err := c.fsys.Open(from)
	if err != nil {
		return fmt.Errorf("copy output %s: %w", from, err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	got, err := io.Copy(ctxWriter{ctx, dst}, io.NewSectionReader(src, 0, n))
	if err == nil && got != n {
		err = fmt.Errorf("the file holds %d bytes of the %d committed: %w", got, n, ErrCorrupt)
	}
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy output %s: %w", from, err)
	}
	return nil
}
