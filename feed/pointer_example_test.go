package feed_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/tidemark-go/tidemark/feed"
)

// A pointer file remembers how far an input has been processed. Load it at
// start; Store a position once every line before it has been processed.
func ExamplePointerFile() {
	dir, err := os.MkdirTemp("", "pointer-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ledger.csv"+feed.PointerSuffix)

	pf := feed.OpenPointerFile(path, feed.PointerFileOptions{Sync: feed.SyncEveryCommit})
	res, err := pf.Load()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("missing:", res.Missing)

	// No pointer: start at 0 under a new epoch.
	epoch := feed.NewEpoch(0, time.Now())
	if err := pf.Store(feed.Pointer{Epoch: epoch, Position: 42}); err != nil {
		log.Fatal(err)
	}
	// Behind the stored position in the same epoch: ignored.
	if err := pf.Store(feed.Pointer{Epoch: epoch, Position: 7}); err != nil {
		log.Fatal(err)
	}
	if err := pf.Close(); err != nil {
		log.Fatal(err)
	}

	res, err = feed.OpenPointerFile(path, feed.PointerFileOptions{}).Load()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("found:", res.Found, "position:", res.Pointer.Position, "same epoch:", res.Pointer.Epoch == epoch)
	// Output:
	// missing: true
	// found: true position: 42 same epoch: true
}

// DecodePointer reads one record; EncodePointer writes one.
func ExampleDecodePointer() {
	rec := feed.EncodePointer(nil, feed.Pointer{Epoch: 1, Position: 100})
	p, err := feed.DecodePointer(rec)
	fmt.Println(len(rec), p.Position, err)

	rec[30] ^= 1 // bit rot
	_, err = feed.DecodePointer(rec)
	fmt.Println(err != nil)
	// Output:
	// 80 100 <nil>
	// true
}
