//go:build !cgo

package state

// pebbleOffHeap reports whether Pebble allocates its block cache and
// memtables outside the Go heap: without cgo, its internal/manual package
// makes them Go slices, heap that the Go runtime's memory limit covers
// (see MemoryLimit).
const pebbleOffHeap = false
