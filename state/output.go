package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/tidemark-go/tidemark/internal/vfs"
)

// Output is an append-only file in a store's directory whose committed
// length is recorded in the same transaction as the state. Bytes staged
// with [Tx.Output] are appended and synced when their batch commits, just
// before the state; bytes past the committed length (from a batch whose
// state never committed) are cut off when the store opens. So every line
// is in the file exactly once, whatever moment a crash picks.
//
// Read the file after [Store.Flush] or [Store.Close]: before, it may end
// with bytes of a batch still committing.
type Output struct {
	name, path string
	f          vfs.File

	mu        sync.Mutex
	committed int64
}

// Name returns the output's name.
func (o *Output) Name() string { return o.name }

// Path returns the output file's path.
func (o *Output) Path() string { return o.path }

// Committed returns the output's committed length: every byte before it is
// durable and recorded with the state.
func (o *Output) Committed() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.committed
}

func (o *Output) setCommitted(n int64) {
	o.mu.Lock()
	o.committed = n
	o.mu.Unlock()
}

// append writes p at the committed length (over the bytes of an earlier
// failed batch, if any) and syncs the file. It returns the new length.
func (o *Output) append(p []byte) (int64, error) {
	off := o.Committed()
	if _, err := o.f.WriteAt(p, off); err != nil {
		return 0, fmt.Errorf("write %d bytes at %d to output %s: %w", len(p), off, o.path, err)
	}
	if err := o.f.Datasync(); err != nil {
		return 0, fmt.Errorf("sync output %s: %w", o.path, err)
	}
	return off + int64(len(p)), nil
}

// reserved are the names a store uses itself.
var reservedNames = map[string]bool{storeFile: true, storeFile + ".tmp": true, boltFile: true, pebbleDir: true}

func validOutputName(name string) bool {
	return name != "" && name != "." && name != ".." && filepath.Base(name) == name &&
		!reservedNames[name] && !reservedNames[filepath.Clean(name)]
}

// output returns the declared output name, declaring it if needed: its
// committed length 0 is recorded durably before the file is created, so
// that a crash can never leave bytes in a file the store does not know.
func (c *core) output(name string) (*Output, error) {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if o := c.outputs[name]; o != nil {
		return o, nil
	}
	if !validOutputName(name) {
		return nil, fmt.Errorf("output %q in store %s: want a plain file name not used by the store: %w", name, c.dir, ErrBadName)
	}
	c.mu.Lock()
	err := c.unusable()
	c.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("declare output %q in store %s: %w", name, c.dir, err)
	}
	if err := c.eng.commit([]write{{key: outputKey(name), val: encodeInt64(0)}}); err != nil {
		return nil, fmt.Errorf("declare output %q in %s store %s: %w", name, c.kind, c.dir, err)
	}
	o, err := c.openOutput(name, 0)
	if err != nil {
		return nil, err
	}
	if err := c.fsys.SyncDir(c.dir); err != nil {
		return nil, errors.Join(fmt.Errorf("declare output %q: sync directory %s: %w", name, c.dir, err), o.f.Close())
	}
	c.outputs[name] = o
	return o, nil
}

// openOutput opens the output file and cuts it back to committed.
func (c *core) openOutput(name string, committed int64) (*Output, error) {
	path := filepath.Join(c.dir, name)
	f, err := c.fsys.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open output %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open output %s: %w", path, err), f.Close())
	}
	switch size := fi.Size(); {
	case size < committed:
		return nil, errors.Join(fmt.Errorf("output %s is %d bytes, shorter than the %d bytes committed: it was cut or replaced outside the store; restore it, or remove the store directory to start over: %w",
			path, size, committed, ErrCorrupt), f.Close())
	case size > committed:
		c.log.Warn("state: output file cut back to its committed length (the bytes past it belong to a batch whose state was never saved)",
			"output", path, "size", size, "committed", committed)
		err := f.Truncate(committed)
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("cut output %s back to %d bytes: %w", path, committed, err), f.Close())
		}
	}
	return &Output{name: name, path: path, f: f, committed: committed}, nil
}

func (c *core) closeOutputs() error {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	var errs []error
	for name, o := range c.outputs {
		if err := o.f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close output %s: %w", o.path, err))
		}
		delete(c.outputs, name)
	}
	return errors.Join(errs...)
}
