//go:build !unix && !windows

package vfs

import (
	"errors"
	"os"
)

func (f *osFile) Lock() error {
	return &os.PathError{Op: "lock", Path: f.Name(), Err: errors.ErrUnsupported}
}
