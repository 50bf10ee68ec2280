package pointer

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestHashBytesIsFNV1a64(t *testing.T) {
	// Golden values: HashBytes is stored on disk and must never change.
	golden := map[string]uint64{
		"":       0xcbf29ce484222325,
		"a":      0xaf63dc4c8601ec8c,
		"foobar": 0x85944171f73967e8,
	}
	for in, want := range golden {
		if got := HashBytes([]byte(in)); got != want {
			t.Errorf("HashBytes(%q) = %#x, want %#x", in, got, want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100 {
		b := make([]byte, rng.IntN(5000))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		h := fnv.New64a()
		h.Write(b)
		if got, want := HashBytes(b), h.Sum64(); got != want {
			t.Fatalf("HashBytes of %d bytes = %#x, hash/fnv says %#x", len(b), got, want)
		}
	}
}

func TestNewEpoch(t *testing.T) {
	now := time.Unix(1_700_000_000, 5)
	ns := uint64(now.UnixNano())
	tests := []struct {
		name string
		prev uint64
		now  time.Time
		want uint64
	}{
		{"first epoch is the time", 0, now, ns},
		{"earlier prev takes the time", ns - 1, now, ns},
		{"equal prev is passed by one", ns, now, ns + 1},
		{"later prev (clock stepped back) is passed by one", ns + 1000, now, ns + 1001},
		{"time before 1970", 7, time.Unix(-5, 0), 8},
		{"zero time", 7, time.Time{}, 8},
		{"largest prev does not wrap", math.MaxUint64, now, math.MaxUint64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NewEpoch(tc.prev, tc.now); got != tc.want {
				t.Errorf("NewEpoch(%d, %v) = %d, want %d", tc.prev, tc.now, got, tc.want)
			}
		})
	}
}
