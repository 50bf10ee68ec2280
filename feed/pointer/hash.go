package pointer

import (
	"math"
	"time"
)

// FNV-1a 64 parameters.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// HashBytes is the hash of fingerprints and tail hashes: 64-bit FNV-1a (the
// same value as hash/fnv.New64a). It is stored in pointer files and state
// stores, so it never changes. A store that checks its own record against
// an input hashes the bytes with it ([tidemark.Origin.TailHash] returns it).
func HashBytes(b []byte) uint64 {
	h := uint64(fnvOffset64)
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime64
	}
	return h
}

// NewEpoch returns an epoch larger than prev, based on now: now in
// nanoseconds since 1970 when that is larger than prev, else prev+1. At the
// largest uint64 it returns prev, which no real clock reaches.
func NewEpoch(prev uint64, now time.Time) uint64 {
	if ns := now.UnixNano(); ns > 0 && uint64(ns) > prev {
		return uint64(ns)
	}
	if prev == math.MaxUint64 {
		return prev
	}
	return prev + 1
}
