package pointer_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/tidemark-go/tidemark/feed/pointer"
)

// A pointer file remembers how far an input has been processed. Load it at
// start; Store a position once every line before it has been processed.
func ExampleFile() {
	dir, err := os.MkdirTemp("", "pointer-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ledger.csv"+pointer.Suffix)

	pf := pointer.Open(path, pointer.Options{Sync: pointer.SyncEveryCommit})
	res, err := pf.Load()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("missing:", res.Missing)

	// No pointer: start at 0 under a new epoch.
	epoch := uint64(time.Now().UnixNano()) // pointer.NewEpoch(prev, time.Now()) gives a new one
	if err := pf.Store(pointer.Record{Epoch: epoch, Position: 42}); err != nil {
		log.Fatal(err)
	}
	// Behind the stored position in the same epoch: ignored.
	if err := pf.Store(pointer.Record{Epoch: epoch, Position: 7}); err != nil {
		log.Fatal(err)
	}
	if err := pf.Close(); err != nil {
		log.Fatal(err)
	}

	res, err = pointer.Open(path, pointer.Options{}).Load()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("found:", res.Found, "position:", res.Record.Position, "same epoch:", res.Record.Epoch == epoch)
	// Output:
	// missing: true
	// found: true position: 42 same epoch: true
}

// Decode reads one record; Encode writes one.
func ExampleDecode() {
	rec := pointer.Encode(nil, pointer.Record{Epoch: 1, Position: 100})
	p, err := pointer.Decode(rec)
	fmt.Println(len(rec), p.Position, err)

	rec[30] ^= 1 // bit rot
	_, err = pointer.Decode(rec)
	fmt.Println(err != nil)
	// Output:
	// 80 100 <nil>
	// true
}
