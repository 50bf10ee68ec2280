//go:build !linux

package vfs

func (f *osFile) Datasync() error { return f.Sync() }
