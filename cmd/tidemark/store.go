package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/ops"
	"github.com/tidemark-go/tidemark/state"
)

const storeHelp = `Usage:
  tidemark store show DIR [flags]
  tidemark store show --addr HOST:PORT [--store NAME] [--token T] [flags]
  tidemark store backup DIR DEST [--wait D]
  tidemark store backup --addr HOST:PORT [--store NAME] [--token T] DEST
  tidemark store upgrade DIR [--wait D]

store show prints what a store holds: its backend, then for each namespace
the applied records (feed, file, epoch, position and the lineage recorded
with them) and each bucket's keys and values. A bucket written by a
state.Table has its codecs recorded in the store: its keys and values are
printed decoded (int64 and uint64 as numbers, strings as they are, JSON as
its text); other bytes are printed as Go quoted strings. At most --limit
keys are printed per bucket (default 100; -1 prints none); the line after
the last says how to go on (--from). Flags:
  --namespace NS   only this namespace (repeatable; default all)
  --bucket B       only this bucket ("" is the root; repeatable; default all)
  --prefix P       only the keys that start with P (a number for int64 keys)
  --from K         start at key K (as printed in "more: --from K")
  --limit N        at most N keys per bucket
  --count          count each bucket's keys (reads them all)
  --feed FEED      print only these feeds' applied records (repeatable); a
                   feed without one is printed as "-"
  --config FILE    the feeds of a server config, as --feed
  --json           print the listing as JSON (ops.StoreListing)

store backup writes a consistent copy of the store into the new folder
DEST (it must not exist, or be empty): the applied positions are inside
it, and opening the copy as a store is a restore (a restored older copy
re-reads what it lacks from the feeds).

store upgrade converts a store to the newest format of its backend, in
place. A store of format 1, made before values carried checksums, gets
them: every value gets the CRC-32C the store checks on every read (a store
of format 1 opens and works without it, and its damaged values go unseen).
A bbolt store of format 1 to 3 also gets a bucket per table (format 4, as a
new bbolt store): each table's keys move into a bucket of their own,
without the table's name in front of each, a smaller and shallower tree
(faster commits and lookups); the values do not change. A bbolt file is
checked first. The upgrade survives a crash or a kill at any moment (the
next open finishes it); a version of tidemark from before the new format
cannot open the store after it, and says so. A Pebble or PostgreSQL store
of format 2 or 3 needs nothing (one of format 2 becomes one of format 3 by
itself with the first batch that writes to an output file). The server
must be stopped.

With DIR the store is opened as a server opens it, so the server must be
stopped: a running server holds the store's lock, and the command fails
after --wait (default 2s). With --addr the command asks a running server,
through its operator listener (GET /stores/NAME, POST /stores/NAME/backup),
which reads on a snapshot beside its processors without stopping them;
--store names the store (a group's, by the group's name), needed when the
listener reports more than one. For a backup through --addr, DEST is a
folder on the server's host, and must be absolute.
`

func runStore(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageErrorf("store", "store needs a subcommand: show, backup or upgrade")
	}
	switch args[0] {
	case "show":
		return storeShow(args[1:], stdout)
	case "backup":
		return storeBackup(args[1:], stdout)
	case "upgrade":
		return storeUpgrade(args[1:], stdout)
	case "-h", "-help", "--help", "help":
		return &usageError{cmd: "store"}
	}
	return usageErrorf("store", "unknown store subcommand %q", args[0])
}

// storeTarget is the store a command acts on: a folder, or a store of a
// running server.
type storeTarget struct {
	remoteFlags
	store string
	wait  time.Duration
}

func (st *storeTarget) register(fs *flag.FlagSet) {
	st.remoteFlags.register(fs)
	fs.StringVar(&st.store, "store", "", "with --addr: the store's name at the listener (a group's name)")
	fs.DurationVar(&st.wait, "wait", 2*time.Second, "how long to wait for another process to release the store")
}

// open opens the store in dir as the server would.
func (st *storeTarget) open(cmd, dir string) (state.Store, error) {
	wait := st.wait
	if wait <= 0 {
		wait = time.Nanosecond
	}
	s, err := state.OpenDir(dir, &state.Options{LockTimeout: wait, Logger: discardLogger()})
	switch {
	case errors.Is(err, state.ErrLocked):
		return nil, fmt.Errorf("%s %s: %w; it is open by a running server: stop it, or ask the server through its operator listener (--addr HOST:PORT)", cmd, dir, err)
	case errors.Is(err, state.ErrNotStore):
		return nil, fmt.Errorf("%s %s: %w; is DIR the directory given to state.Open?", cmd, dir, err)
	case err != nil:
		return nil, fmt.Errorf("%s %s: %w", cmd, dir, err)
	}
	return s, nil
}

// remoteStore returns the name of the store to ask the listener for:
// --store, or the listener's only one.
func (st *storeTarget) remoteStore(cmd string) (string, error) {
	if st.store != "" {
		return st.store, nil
	}
	body, err := st.do(http.MethodGet, "/stores")
	if err != nil {
		return "", fmt.Errorf("%s: %w", cmd, err)
	}
	var infos []ops.StoreInfo
	if err := json.Unmarshal(body, &infos); err != nil {
		return "", fmt.Errorf("%s: decode the stores of %s: %w; is it a tidemark operator listener?", cmd, st.addr, err)
	}
	switch len(infos) {
	case 0:
		return "", fmt.Errorf("%s: the listener on %s reports no store", cmd, st.addr)
	case 1:
		return infos[0].Store, nil
	}
	names := make([]string, len(infos))
	for i, in := range infos {
		names[i] = in.Store
	}
	return "", fmt.Errorf("%s: the listener on %s reports %d stores (%s): name one with --store", cmd, st.addr, len(infos), strings.Join(names, ", "))
}

func storeShow(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("store show", flag.ContinueOnError)
	var target storeTarget
	target.register(fs)
	var feeds, buckets, namespaces multiFlag
	fs.Var(&feeds, "feed", "print only this feed's applied records (repeatable)")
	fs.Var(&buckets, "bucket", "only this bucket (repeatable)")
	fs.Var(&namespaces, "namespace", "only this namespace (repeatable)")
	config := fs.String("config", "", "a server config (YAML) whose feeds to print")
	prefix := fs.String("prefix", "", "only the keys that start with this")
	from := fs.String("from", "", "start at this key")
	limit := fs.Int("limit", ops.DefaultShowLimit, "at most this many keys per bucket (-1: none)")
	count := fs.Bool("count", false, "count each bucket's keys")
	asJSON := fs.Bool("json", false, "print the listing as JSON")
	pos, err := parse("store", fs, args)
	if err != nil {
		return err
	}
	if *config != "" {
		cfg, err := framework.LoadConfigFile(*config)
		if err != nil {
			return fmt.Errorf("store show: read the feeds of config %s: %w", *config, err)
		}
		for _, f := range cfg.Feeds {
			feeds = append(feeds, f.Name)
		}
	}
	o := ops.ShowOptions{Prefix: *prefix, From: *from, Limit: *limit, Count: *count}
	if *limit == 0 {
		o.Limit = -1 // --limit 0: no keys, as -1 (0 is the default in ShowOptions)
	}
	if len(namespaces) > 0 {
		o.Namespaces = namespaces
	}
	if len(buckets) > 0 {
		o.Buckets = buckets
	}
	var ls ops.StoreListing
	switch {
	case target.addr != "":
		if len(pos) != 0 {
			return usageErrorf("store", "store show --addr takes no store directory (got %q): the listener names its stores (--store)", pos)
		}
		if ls, err = showRemote(&target, o); err != nil {
			return err
		}
	case len(pos) != 1:
		return usageErrorf("store", "store show needs one store directory (or --addr HOST:PORT of a running server), got %d arguments", len(pos))
	default:
		st, err := target.open("store show", pos[0])
		if err != nil {
			return err
		}
		ls, err = ops.ShowStore(context.Background(), pos[0], st, o)
		if err = errors.Join(err, st.Close()); err != nil {
			return fmt.Errorf("store show %s: %w", pos[0], err)
		}
	}
	if *asJSON {
		b, err := json.MarshalIndent(ls, "", "  ")
		if err != nil {
			return err
		}
		_, err = stdout.Write(append(b, '\n'))
		return err
	}
	return printListing(stdout, ls, feeds)
}

func showRemote(target *storeTarget, o ops.ShowOptions) (ops.StoreListing, error) {
	var ls ops.StoreListing
	name, err := target.remoteStore("store show")
	if err != nil {
		return ls, err
	}
	q := url.Values{}
	for _, ns := range o.Namespaces {
		q.Add("namespace", ns)
	}
	for _, b := range o.Buckets {
		q.Add("bucket", b)
	}
	if o.Prefix != "" {
		q.Set("prefix", o.Prefix)
	}
	if o.From != "" {
		q.Set("from", o.From)
	}
	q.Set("limit", strconv.Itoa(o.Limit))
	if o.Count {
		q.Set("count", "1")
	}
	body, err := target.do(http.MethodGet, "/stores/"+url.PathEscape(name)+"?"+q.Encode())
	if err != nil {
		return ls, fmt.Errorf("store show: %w", err)
	}
	if err := json.Unmarshal(body, &ls); err != nil {
		return ls, fmt.Errorf("store show: decode the listing of %s: %w", target.addr, err)
	}
	return ls, nil
}

// formatHint says what tidemark store upgrade would do to a store of the
// listing's format, or nothing when it is of the newest format of its
// backend (a listing of a server from before formats were listed says 0).
func formatHint(ls ops.StoreListing) string {
	switch {
	case ls.Format == 1:
		return " (its values carry no checksums: stop the program and run \"tidemark store upgrade DIR\")"
	case ls.Format > 0 && ls.Format < 4 && ls.Backend == state.Bolt:
		return " (each table's keys are in the store's bucket: \"tidemark store upgrade DIR\", with the program stopped, moves them into buckets of their own, as in a new bbolt store)"
	}
	return ""
}

// printListing prints a store listing as text; feeds, when set, selects
// the applied records printed.
func printListing(out io.Writer, ls ops.StoreListing, feeds []string) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "store\t%s\n", ls.Dir)
	fmt.Fprintf(w, "backend\t%s\n", ls.Backend)
	fmt.Fprintf(w, "format\t%d%s\n", ls.Format, formatHint(ls))
	if err := w.Flush(); err != nil {
		return err
	}
	if len(ls.Namespaces) == 0 {
		fmt.Fprintln(out, "\n(no namespace holds keys or applied positions)")
	}
	for _, ns := range ls.Namespaces {
		if ns.Name == "" {
			fmt.Fprintf(out, "\nnamespace %q (the default)\n", ns.Name)
		} else {
			fmt.Fprintf(out, "\nnamespace %q\n", ns.Name)
		}
		w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "  FEED\tFILE\tEPOCH\tPOSITION\tDEVICE\tINODE\tFINGERPRINT\tTAIL")
		seen := map[string]bool{}
		for _, a := range ns.Applied {
			if len(feeds) > 0 && !slices.Contains(feeds, a.Feed) {
				continue
			}
			seen[a.Feed] = true
			file := a.File
			if file == "" {
				file = "-"
			}
			fmt.Fprintf(w, "  %s\t%s\t%d\t%d\t%d\t%d\t%d bytes %016x\t%d bytes %016x\n", a.Feed, file, a.Epoch, a.Position,
				a.Device, a.Inode, a.FingerprintLen, a.FingerprintHash, a.TailLen, a.TailHash)
		}
		for _, f := range feeds {
			if !seen[f] {
				fmt.Fprintf(w, "  %s\t-\t-\t-\t-\t-\t-\t-\n", f)
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if len(ns.Applied) == 0 && len(feeds) == 0 {
			fmt.Fprintln(out, "  (nothing applied in this namespace)")
		}
		for _, b := range ns.Buckets {
			desc := "raw bytes: no table recorded its codecs"
			if b.KeyCodec != "" {
				desc = "keys " + b.KeyCodec + ", values " + b.ValueCodec
			}
			if b.Count >= 0 {
				desc += fmt.Sprintf("; %d keys", b.Count)
			}
			name := strconv.Quote(b.Name)
			if b.Name == "" {
				name += " (the root bucket)"
			}
			fmt.Fprintf(out, "  bucket %s (%s)\n", name, desc)
			w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			for _, e := range b.Entries {
				fmt.Fprintf(w, "    %s\t%s\n", printable(e.Key, strings.Contains(e.Raw, "key")), printable(e.Value, strings.Contains(e.Raw, "value")))
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if b.Next != "" {
				fmt.Fprintf(out, "    ... more: --from %s\n", shellQuote(b.Next))
			}
		}
	}
	return nil
}

// printable returns s for a line of text: a decoded string holding
// control characters is quoted; raw bytes are quoted already.
func printable(s string, raw bool) string {
	if raw || strconv.CanBackquote(s) && !strings.ContainsAny(s, "\t") {
		return s
	}
	return strconv.Quote(s)
}

// shellQuote quotes s for a shell where it needs it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@+,", r))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func storeBackup(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("store backup", flag.ContinueOnError)
	var target storeTarget
	target.register(fs)
	// A backup of a large store takes longer than a status request.
	fs.Lookup("timeout").DefValue = "1h"
	target.timeout = time.Hour
	pos, err := parse("store", fs, args)
	if err != nil {
		return err
	}
	if target.addr != "" {
		if len(pos) != 1 {
			return usageErrorf("store", "store backup --addr needs one argument, the backup's new folder on the server's host, got %d", len(pos))
		}
		dest := pos[0]
		if !filepath.IsAbs(dest) {
			return usageErrorf("store", "store backup --addr: %q is relative, and would be taken from the server's working folder: give an absolute path on the server's host", dest)
		}
		name, err := target.remoteStore("store backup")
		if err != nil {
			return err
		}
		body, err := target.do(http.MethodPost, "/stores/"+url.PathEscape(name)+"/backup?"+url.Values{"dir": {dest}}.Encode())
		if err != nil {
			return fmt.Errorf("store backup: %w", err)
		}
		var res ops.BackupResult
		if err := json.Unmarshal(body, &res); err != nil {
			return fmt.Errorf("store backup: decode the answer of %s: %w", target.addr, err)
		}
		fmt.Fprintf(stdout, "backup of store %q written to %s on the server's host (%.1fs)\n", res.Store, res.Dir, res.Seconds)
		return nil
	}
	if len(pos) != 2 {
		return usageErrorf("store", "store backup needs the store directory and the backup's new folder (or --addr HOST:PORT of a running server), got %d arguments", len(pos))
	}
	st, err := target.open("store backup", pos[0])
	if err != nil {
		return err
	}
	start := time.Now()
	err = st.Backup(context.Background(), pos[1])
	if err = errors.Join(err, st.Close()); err != nil {
		return fmt.Errorf("store backup: %w", err)
	}
	fmt.Fprintf(stdout, "backup of %s written to %s (%.1fs)\n", pos[0], pos[1], time.Since(start).Seconds())
	return nil
}
