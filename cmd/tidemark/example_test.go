package main

import "os"

// The command is a function of its arguments, so tests and examples run it
// in-process.
func Example() {
	code := run([]string{"help", "release"}, os.Stdout, os.Stderr)
	if code != exitOK {
		panic(code)
	}
	// Output:
	// Usage:
	//   tidemark release --addr HOST:PORT --feed FEED --consumer GROUP [--token T] [--timeout D]
	//
	// Gives up the hold that a removed consumer (a group whose queue was removed
	// with lines unfinished) has on a feed's pointer, through the operator
	// listener (POST /feeds/FEED/release). The pointer may then move past the
	// lines that consumer left unfinished: that consumer never processes them.
	// Use it when a run must complete without a restart; "tidemark status" lists
	// the removed queues that hold a feed. A listener with a token demands it
	// (--token, or $TIDEMARK_TOKEN).
}
