//go:build !unix

package state

import "time"

// dirLock is no lock on a system without flock: the backend's own lock
// (bbolt's on state.bolt, Pebble's LOCK) still keeps a second process out
// of an existing store, but not out of a folder being created.
type dirLock struct{}

func lockDir(string, time.Duration) (*dirLock, error) { return &dirLock{}, nil }

func (*dirLock) release() error { return nil }
