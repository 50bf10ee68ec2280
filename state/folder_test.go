package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark-go/tidemark/vfs"
)

// The rules of a store folder: a STORE file stands for the backend's data;
// a folder that is not what its STORE file says is an error that changes
// nothing in it, output files included.

// storeWithOutput makes a store of be in a new folder with 3 lines applied
// and an output file, closed. It returns the folder and the output's bytes.
func storeWithOutput(t *testing.T, be backend) (dir string, out []byte) {
	t.Helper()
	dir = t.TempDir()
	s := mustOpen(t, be, dir, testOpts())
	for n := 1; n <= 3; n++ {
		_, err := s.Apply(context.Background(), del("f", 1, n), func(tx *Tx) error {
			if _, err := tx.AddInt64([]byte("count"), 1); err != nil {
				return err
			}
			_, err := fmt.Fprintf(tx.Output("output.csv"), "line %d\n", n)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(filepath.Join(dir, "output.csv"))
	if err != nil || len(out) == 0 {
		t.Fatalf("output: %q, %v", out, err)
	}
	return dir, out
}

// checkUntouched checks that the output is as it was and that no backend
// made data in dir beyond want.
func checkUntouched(t *testing.T, dir string, out []byte, want ...string) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(dir, "output.csv")); err != nil || string(b) != string(out) {
		t.Fatalf("output.csv now holds %q (%v), was %q", b, err, out)
	}
	disk, err := onDisk(&Options{}, vfs.Default(), dir)
	if err != nil || fmt.Sprint(disk) != fmt.Sprint(want) {
		t.Fatalf("backends on disk: %v (%v), want %v", disk, err, want)
	}
}

func backendNamed(name string) backend {
	for _, be := range backends() {
		if be.name == name {
			return be
		}
	}
	panic("no backend " + name)
}

func other(kind string) string {
	if kind == Bolt {
		return Pebble
	}
	return Bolt
}

// TestStoreDataDeletedIsAnError: state.bolt deleted (or emptied), or the
// Pebble database deleted, while the folder keeps STORE and output.csv.
// It used to give a new empty store and cut output.csv to 0.
func TestStoreDataDeletedIsAnError(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		damages := map[string]func(dir string) error{}
		if be.name == Bolt {
			damages["state.bolt deleted"] = func(dir string) error { return os.Remove(filepath.Join(dir, boltFile)) }
			damages["state.bolt emptied"] = func(dir string) error { return os.Truncate(filepath.Join(dir, boltFile), 0) }
		} else {
			damages["pebble/ deleted"] = func(dir string) error { return os.RemoveAll(filepath.Join(dir, pebbleDir)) }
			damages["pebble/'s files deleted"] = func(dir string) error {
				es, err := os.ReadDir(filepath.Join(dir, pebbleDir))
				for _, e := range es {
					err = errors.Join(err, os.Remove(filepath.Join(dir, pebbleDir, e.Name())))
				}
				return err
			}
		}
		for name, damage := range damages {
			t.Run(name, func(t *testing.T) {
				dir, out := storeWithOutput(t, be)
				if err := damage(dir); err != nil {
					t.Fatal(err)
				}
				for _, cfg := range []string{dir, be.name + ":" + dir} {
					_, err := Open(cfg, testOpts())
					if !errors.Is(err, ErrStoreMissing) {
						t.Fatalf("Open(%q): %v; want ErrStoreMissing", cfg, err)
					}
					for _, want := range []string{dir, "STORE", be.name, "output.csv", "backup", "remove the whole folder"} {
						if !strings.Contains(err.Error(), want) {
							t.Fatalf("the error does not say %q: %v", want, err)
						}
					}
					checkUntouched(t, dir, out)
				}
				// The other backend does not take the folder either.
				if _, err := Open(other(be.name)+":"+dir, testOpts()); !errors.Is(err, ErrBackendMismatch) {
					t.Fatalf("open as %s: %v", other(be.name), err)
				}
				checkUntouched(t, dir, out)
			})
		}
	})
}

// TestStoreFileEditedIsAnError: STORE names another backend than the one
// whose data the folder holds.
func TestStoreFileEditedIsAnError(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir, out := storeWithOutput(t, be)
		edited := fmt.Sprintf("tidemark state store\nbackend %s\n", other(be.name))
		if err := os.WriteFile(filepath.Join(dir, storeFile), []byte(edited), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, cfg := range []string{dir, other(be.name) + ":" + dir, be.name + ":" + dir} {
			_, err := Open(cfg, testOpts())
			if !errors.Is(err, ErrBackendMismatch) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("Open(%q) with STORE edited: %v; want ErrBackendMismatch", cfg, err)
			}
			checkUntouched(t, dir, out, be.name)
		}
		_, err := OpenDir(dir, testOpts())
		for _, want := range []string{"names a " + other(be.name), "holds a " + describe(be.name), "backend " + be.name} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("the error does not say %q: %v", want, err)
			}
		}
	})
}

// TestStoreFolderWithBothBackends: a folder with the data of both
// backends is refused, whatever STORE says.
func TestStoreFolderWithBothBackends(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir, out := storeWithOutput(t, be)
		otherDir, _ := storeWithOutput(t, backendNamed(other(be.name)))
		var data string
		if be.name == Bolt {
			data = pebbleDir
		} else {
			data = boltFile
		}
		if err := os.Rename(filepath.Join(otherDir, data), filepath.Join(dir, data)); err != nil {
			t.Fatal(err)
		}
		_, err := OpenDir(dir, testOpts())
		if !errors.Is(err, ErrBackendMismatch) || !strings.Contains(err.Error(), "two backends") {
			t.Fatalf("OpenDir of a folder with both: %v", err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "output.csv")); string(b) != string(out) {
			t.Fatalf("output.csv now holds %q", b)
		}
	})
}

// TestStoreFolderWithoutStoreFile: the backend's data without STORE (a
// run that stopped between creating the backend and writing STORE, which
// comes last, or STORE deleted). OpenDir says which backend to open it
// with; the other backend is refused; the right one takes it and records
// STORE again.
func TestStoreFolderWithoutStoreFile(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir, out := storeWithOutput(t, be)
		if err := os.Remove(filepath.Join(dir, storeFile)); err != nil {
			t.Fatal(err)
		}
		_, err := OpenDir(dir, testOpts())
		if !errors.Is(err, ErrNotStore) || !strings.Contains(err.Error(), fmt.Sprintf("%q", be.name+":"+dir)) {
			t.Fatalf("OpenDir without STORE: %v", err)
		}
		if _, err := Open(other(be.name)+":"+dir, testOpts()); !errors.Is(err, ErrBackendMismatch) {
			t.Fatalf("open as %s without STORE: %v", other(be.name), err)
		}
		checkUntouched(t, dir, out, be.name)
		s := mustOpen(t, be, dir, testOpts())
		if getInt(t, s, "count") != 3 {
			t.Fatal("the state was lost")
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if kind, err := readStoreFile(vfs.Default(), dir); err != nil || kind != be.name {
			t.Fatalf("STORE after the open: %q, %v", kind, err)
		}
		checkUntouched(t, dir, out, be.name)
	})
}

// TestStoreFileIsWrittenLast: a new store's STORE file is written once
// the backend holds data, so that a STORE file always stands for a store.
func TestStoreFileIsWrittenLast(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		o := testOpts()
		var sawData bool
		o.FS = vfs.Inject(vfs.Default(), func(op vfs.Op, path string) error {
			if op == vfs.OpRename && filepath.Base(path) == storeFile {
				disk, _ := onDisk(&Options{}, vfs.Default(), dir)
				sawData = len(disk) == 1 && disk[0] == be.name
			}
			return nil
		})
		s := mustOpen(t, be, dir, o)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if !sawData {
			t.Fatal("STORE was written before the backend's data")
		}
	})
}
