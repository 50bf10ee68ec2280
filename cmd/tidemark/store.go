package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

const storeHelp = `Usage:
  tidemark store show DIR [--feed FEED]... [--config FILE.yaml] [--namespace NS] [--bucket B]... [--wait D]

Prints a store's backend (read from DIR/STORE), its last applied position per
feed with the lineage recorded with it, and its key count (of the
namespace's root bucket, and of each --bucket).

The feeds are those named with --feed and those of the server config
--config. The store is opened as a server opens it, so run this while the
server is stopped: a running server holds the store's lock, and the command
fails after --wait (default 2s). Opening recovers what a crash left (an
output file is cut back to its committed length), as the next start would.
`

func runStore(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageErrorf("store", "store needs a subcommand: show")
	}
	switch args[0] {
	case "show":
		return storeShow(args[1:], stdout)
	case "-h", "-help", "--help", "help":
		return &usageError{cmd: "store"}
	}
	return usageErrorf("store", "unknown store subcommand %q", args[0])
}

func storeShow(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("store show", flag.ContinueOnError)
	var feeds, buckets multiFlag
	fs.Var(&feeds, "feed", "a feed whose applied position to show (repeatable)")
	fs.Var(&buckets, "bucket", "a bucket whose keys to count (repeatable)")
	config := fs.String("config", "", "a server config (YAML) whose feeds to show")
	ns := fs.String("namespace", "", "the namespace to show")
	wait := fs.Duration("wait", 2*time.Second, "how long to wait for another process to release the store")
	pos, err := parse("store", fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("store", "store show needs one store directory, got %d arguments", len(pos))
	}
	dir := pos[0]
	if *config != "" {
		cfg, err := framework.LoadConfigFile(*config)
		if err != nil {
			return fmt.Errorf("store show: read the feeds of config %s: %w", *config, err)
		}
		for _, f := range cfg.Feeds {
			feeds = append(feeds, f.Name)
		}
	}
	if *wait <= 0 {
		*wait = time.Nanosecond
	}
	st, err := state.OpenDir(dir, &state.Options{LockTimeout: *wait, Logger: discardLogger()})
	switch {
	case errors.Is(err, state.ErrLocked):
		return fmt.Errorf("store show %s: %w; it is open by a running server: stop it, or read the store's status from the server's operator listener (tidemark status)", dir, err)
	case errors.Is(err, state.ErrNotStore):
		return fmt.Errorf("store show %s: %w; is DIR the directory given to state.Open?", dir, err)
	case err != nil:
		return fmt.Errorf("store show %s: %w", dir, err)
	}
	view := st.Namespace(*ns)
	err = showStore(stdout, st, view, *ns, feeds, buckets)
	return errors.Join(err, st.Close())
}

func showStore(out io.Writer, st state.Store, view state.Namespace, ns string, feeds, buckets []string) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "store\t%s\n", st.Dir())
	fmt.Fprintf(w, "backend\t%s\n", st.Backend())
	if ns == "" {
		fmt.Fprintf(w, "namespace\t%q (the default)\n", ns)
	} else {
		fmt.Fprintf(w, "namespace\t%q\n", ns)
	}
	counts := make([]int, len(buckets)+1)
	err := view.View(func(tx *state.Tx) error {
		if err := tx.ForEach(func(_, _ []byte) error { counts[0]++; return nil }); err != nil {
			return fmt.Errorf("count the keys of the root bucket: %w", err)
		}
		for i, b := range buckets {
			if err := tx.Bucket(b).ForEach(func(_, _ []byte) error { counts[i+1]++; return nil }); err != nil {
				return fmt.Errorf("count the keys of bucket %q: %w", b, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store show %s: %w", st.Dir(), err)
	}
	fmt.Fprintf(w, "keys\t%d in the root bucket\n", counts[0])
	for i, b := range buckets {
		fmt.Fprintf(w, "\t%d in bucket %q\n", counts[i+1], b)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	if len(feeds) == 0 {
		fmt.Fprintln(out, "applied positions: name the feeds with --feed or --config")
		return nil
	}
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "FEED\tEPOCH\tPOSITION\tDEVICE\tINODE\tFINGERPRINT\tTAIL")
	for _, f := range feeds {
		l, ok := view.Applied(f)
		if !ok {
			fmt.Fprintf(w, "%s\t-\t-\t-\t-\t-\t-\n", f)
			continue
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d bytes %016x\t%d bytes %016x\n", f, l.Epoch, l.Position,
			l.Identity.Dev, l.Identity.Ino, l.Fingerprint.Len, l.Fingerprint.Hash, l.TailLen, l.TailHash)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "(- : nothing applied for that feed in this namespace)")
	return nil
}
