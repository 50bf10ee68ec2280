// Command tidemark is the operator's tool for tidemark: it inspects and
// repairs pointer files, reads the status of a running server and releases
// its holds through the server's operator listener (package ops), and shows
// what a store holds and backs it up, on a stopped server's store folder or
// through a running server's listener.
//
//	tidemark pointer show FILE.readPointer [--input PATH]
//	tidemark pointer set FILE.readPointer --position N [--force] [--input PATH]
//	tidemark pointer migrate FILE.readPointer [--utf16] [--dry-run] [--input PATH]
//	tidemark status --addr HOST:PORT [--token T] [--json] [--check]
//	tidemark release --addr HOST:PORT --feed FEED --consumer GROUP [--token T]
//	tidemark store show DIR [--namespace NS]... [--bucket B]... [--prefix P] [--from K] [--limit N] [--count] [--json]
//	tidemark store show --addr HOST:PORT [--store NAME] [the flags above]
//	tidemark store backup DIR DEST
//	tidemark store backup --addr HOST:PORT [--store NAME] DEST
//	tidemark store upgrade DIR [--wait D]
//	tidemark help [COMMAND]
//
// Flags may follow the positional arguments. The exit status is 0 when the
// command did what it was asked, 1 when it failed or refused (the message
// on stderr says why and what to do), 2 for a wrong command line, and 3 when
// status --check found the server not ready, by the rules of the
// listener's /readyz (a stalled feed, a dead or fenced group, a failed
// store, a stopped server; see ops.Report.Health).
//
// # Upgrading from the product tidemark replaces
//
// Its pointer files are 1024 bytes and hold a count of UTF-16 code units,
// not bytes. A feed migrates such a file on its first start: it takes the
// count as a byte offset, resumes at the next line start, and writes the
// current format under a new epoch. For an input that is all ASCII that is
// exactly where the old product stopped. After non-ASCII text the count
// falls short, and the lines in between are delivered again, under the new
// epoch, so a processor de-duplicating by (epoch, position) does not
// recognise them. Before the first start, run
//
//	tidemark pointer show in.log.readPointer
//
// which says whether the input has non-ASCII text before the count and
// where the count ends when read as UTF-16 units, and then either
//
//	tidemark pointer migrate --utf16 in.log.readPointer
//
// to resume where the old product stopped, or pointer migrate without
// --utf16 to do now what the feed would do.
package main
