package feed_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed"
)

// A Committed file source reads lines with their positions, commits what has
// been processed to the pointer file, and resumes there after a restart.
func ExampleNewFileSource() {
	dir, err := os.MkdirTemp("", "feed-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "orders.csv")
	if err := os.WriteFile(path, []byte("id,amount\r\n1,10\r\n2,20\r\n3,"), 0o644); err != nil {
		log.Fatal(err)
	}

	src, err := feed.NewFileSource(feed.Config{Path: path}) // Committed by default
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	items := make([]feed.Item, 16)
	n, err := src.Poll(ctx, items)
	if err != nil {
		log.Fatal(err)
	}
	for _, it := range items[:n] {
		fmt.Printf("seq %d: %q, position %d\n", it.Seq, it.Line, it.Position)
	}
	// Process, then commit the last line processed: the next run starts
	// after it.
	if err := src.Commit(items[n-1].Epoch, items[n-1].Position); err != nil {
		log.Fatal(err)
	}
	n, _ = src.Poll(ctx, items) // at the end: 0, and "3," waits for its '\n'
	st := src.Status()
	fmt.Println(n, st.State, "-", st.Detail)
	src.Close()

	// A restart resumes at the pointer.
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("30\r\n")
	f.Close()
	src, _ = feed.NewFileSource(feed.Config{Path: path})
	defer src.Close()
	n, _ = src.Poll(ctx, items)
	fmt.Printf("after restart: seq %d: %q, position %d\n", items[0].Seq, items[:n][0].Line, items[0].Position)
	// Output:
	// seq 1: "id,amount", position 11
	// seq 2: "1,10", position 17
	// seq 3: "2,20", position 23
	// 0 caught up - partial line pending
	// after restart: seq 1: "3,30", position 29
}

// A once strategy reads to the end of the file and reports ErrDone.
func ExampleFileSource_Poll_onceEarliest() {
	dir, _ := os.MkdirTemp("", "feed-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "batch.txt")
	os.WriteFile(path, []byte("a\nb\n"), 0o644)

	src, _ := feed.NewFileSource(feed.Config{Path: path, Strategy: feed.OnceEarliest})
	defer src.Close()
	items := make([]feed.Item, 16)
	for {
		n, err := src.Poll(context.Background(), items)
		for _, it := range items[:n] {
			fmt.Printf("%s ", it.Line)
		}
		if errors.Is(err, feed.ErrDone) {
			fmt.Println("done")
			return
		}
	}
	// Output: a b done
}

// A store that is behind the pointer (restored from a backup, say) makes
// the source start where the store is: the store is the truth. The
// pointer file is not moved back.
func ExampleFileSource_ResumeFrom() {
	dir, _ := os.MkdirTemp("", "feed-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ledger.csv")
	os.WriteFile(path, []byte("a\nb\nc\n"), 0o644)
	quiet := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	items := make([]feed.Item, 16)

	// A first run reads and commits everything: the pointer is at 6.
	src, _ := feed.NewFileSource(feed.Config{Path: path, Logger: quiet})
	n, _ := src.Poll(ctx, items)
	epoch := items[0].Epoch
	src.Commit(epoch, items[n-1].Position)
	src.Close()

	// The store has applied only "a" (position 2) of that epoch.
	src, _ = feed.NewFileSource(feed.Config{Path: path, Logger: quiet})
	defer src.Close()
	err := src.ResumeFrom([]feed.ResumePoint{{
		Holder:  "group ledger, store bbolt:data",
		Found:   true,
		Lineage: tidemark.Lineage{Applied: tidemark.Applied{Epoch: epoch, Position: 2}},
	}})
	if err != nil {
		log.Fatal(err)
	}
	n, _ = src.Poll(ctx, items)
	for _, it := range items[:n] {
		fmt.Printf("%s at %d\n", it.Line, it.Position)
	}
	st := src.Status()
	fmt.Println("rewinds:", st.Rewinds, "pointer still at:", st.CommittedPosition)
	// Output:
	// b at 4
	// c at 6
	// rewinds: 1 pointer still at: 6
}

// One source per pointer file: a second one fails at start, naming the
// pointer file and the process that holds it.
func ExampleErrPointerLocked() {
	dir, _ := os.MkdirTemp("", "feed-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "orders.csv")
	quiet := slog.New(slog.DiscardHandler)

	first, _ := feed.NewFileSource(feed.Config{Path: path, Logger: quiet})
	_, err := feed.NewFileSource(feed.Config{Path: path, Logger: quiet})
	fmt.Println(errors.Is(err, feed.ErrPointerLocked))
	first.Close()

	// Another pointer folder: another pointer, no conflict.
	second, err := feed.NewFileSource(feed.Config{Path: path, PointerDir: filepath.Join(dir, "other"), Logger: quiet})
	fmt.Println(err)
	second.Close()
	// Output:
	// true
	// <nil>
}
