//go:build cgo

package state

// pebbleOffHeap reports whether Pebble allocates its block cache and
// memtables outside the Go heap: with cgo, its internal/manual package
// takes them from C's allocator, so the Go runtime's memory limit does not
// cover them (see MemoryLimit).
const pebbleOffHeap = true
