package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tidemark-go/tidemark/ops"
)

const statusHelp = `Usage:
  tidemark status --addr HOST:PORT [--token T] [--json] [--check] [--timeout D]

Prints the status of a running server, read from its operator listener
(GET /status, see package ops): a table of feeds (state, epoch, positions,
bytes behind, pending acks, consumers, settled or stalled and why), a table
of the groups' queues on each feed, and the stores the listener reports.
A listener with a token demands it (--token, or $TIDEMARK_TOKEN).
--json prints the listener's JSON as it is. --check makes the exit status 3
when the server is not ready, by the same rules as the listener's /readyz:
it has stopped, a feed has not started or is stopped, stalled (it holds its
pointer for a reason that waiting does not clear) or failing to write its
pointer, a group is dead, fenced or restarting, or a store failed a
commit; stderr says which and why.
`

const releaseHelp = `Usage:
  tidemark release --addr HOST:PORT --feed FEED --consumer GROUP [--token T] [--timeout D]

Gives up the hold that a removed consumer (a group whose queue was removed
with lines unfinished) has on a feed's pointer, through the operator
listener (POST /feeds/FEED/release). The pointer may then move past the
lines that consumer left unfinished: that consumer never processes them.
Use it when a run must complete without a restart; "tidemark status" lists
the removed queues that hold a feed. A listener with a token demands it
(--token, or $TIDEMARK_TOKEN).
`

// tokenEnv names the environment variable that holds the listener's token
// when --token is not given: a token on the command line is visible to
// every user of the host (ps).
const tokenEnv = "TIDEMARK_TOKEN"

// remoteFlags are the flags of the commands that talk to a listener.
type remoteFlags struct {
	addr    string
	token   string
	timeout time.Duration
}

func (r *remoteFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.addr, "addr", "", "the operator listener's HOST:PORT (or http://HOST:PORT)")
	fs.StringVar(&r.token, "token", "", "the listener's token, if it has one (default $"+tokenEnv+")")
	fs.DurationVar(&r.timeout, "timeout", 10*time.Second, "how long to wait for the listener")
}

// url returns the listener's URL of path.
func (r *remoteFlags) url(path string) (string, error) {
	base := r.addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("bad --addr %q: want HOST:PORT", r.addr)
	}
	return strings.TrimSuffix(u.String(), "/") + path, nil
}

// do sends a request to the listener and returns the body of a 2xx
// response; other responses become errors with the listener's message.
func (r *remoteFlags) do(method, path string) ([]byte, error) {
	u, err := r.url(path)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		return nil, err
	}
	token := r.token
	if token == "" {
		token = os.Getenv(tokenEnv)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: r.timeout}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w; is the server running with its operator listener on %s?", method, u, err, r.addr)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read the response: %w", method, u, err)
	}
	if resp.StatusCode/100 != 2 {
		var eb ops.ErrorBody
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &eb) == nil && eb.Error != "" {
			msg = eb.Error
		}
		if resp.StatusCode == http.StatusUnauthorized {
			if token == "" {
				msg += "; pass the listener's token with --token or $" + tokenEnv
			} else {
				msg += "; the token given is not the listener's"
			}
		}
		return nil, fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, msg)
	}
	return body, nil
}

func runStatus(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var rf remoteFlags
	rf.register(fs)
	asJSON := fs.Bool("json", false, "print the listener's JSON")
	check := fs.Bool("check", false, "exit 3 when the server is not ready (as /readyz says)")
	pos, err := parse("status", fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("status", "unexpected arguments %q", pos)
	}
	if rf.addr == "" {
		return usageErrorf("status", "status needs --addr HOST:PORT, the server's operator listener")
	}
	body, err := rf.do(http.MethodGet, "/status")
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	var r ops.Report
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("status: decode the response of %s: %w; is it a tidemark operator listener?", rf.addr, err)
	}
	if *asJSON {
		_, err = stdout.Write(body)
	} else {
		err = printReport(stdout, r)
	}
	if err != nil || !*check {
		return err
	}
	return unhealthy(r)
}

// errUnhealthy is wrapped by the error of status --check.
var errUnhealthy = errors.New("unhealthy")

// unhealthy returns an error wrapping errUnhealthy that lists what keeps
// the server of r from being ready, or nil: the same verdict as the
// listener's /readyz ([ops.Report.Health]).
func unhealthy(r ops.Report) error {
	bad := r.Health().Problems()
	if len(bad) == 0 {
		return nil
	}
	msgs := make([]string, len(bad))
	for i, c := range bad {
		msgs[i] = c.String()
	}
	return fmt.Errorf("%w: %s", errUnhealthy, strings.Join(msgs, "; "))
}

// printReport prints a status report as tables.
func printReport(out io.Writer, r ops.Report) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "FEED\tSTATE\tEPOCH\tREAD\tPOINTER\tSIZE\tBEHIND\tPENDING\tCONSUMERS\tREAD LINES\tDROPPED\tFAILED\tSKIPPED\tSTATUS")
	for _, f := range r.Feeds {
		state := f.State
		if f.Detail != "" {
			state += " (" + f.Detail + ")"
		}
		status := "running"
		switch {
		case f.Stalled:
			status = "STALLED: " + f.StallReason
		case f.Settled:
			status = "settled"
		}
		if f.LastPointerError != "" {
			status += "; pointer write failed: " + f.LastPointerError
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n",
			f.Name, state, f.Epoch, f.ReadPosition, f.PointerPosition, f.FileSize, f.BytesBehind,
			f.PendingAcks, f.Consumers, f.Read, f.Dropped, f.Failed, f.Skipped, status)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	queues := 0
	for _, f := range r.Feeds {
		queues += len(f.Groups)
	}
	if queues > 0 {
		fmt.Fprintln(out)
		w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "FEED\tGROUP\tDEPTH\tPROCESSED\tFAILURES\tSKIPPED\tDROPPED\tSTATE")
		for _, f := range r.Feeds {
			for _, q := range f.Groups {
				state := "live"
				switch {
				case q.Removed:
					state = fmt.Sprintf("removed, holds the pointer (tidemark release --feed %s --consumer %s)", f.Name, q.Group)
				case q.Fenced:
					state = "fenced"
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", f.Name, q.Group, q.Depth, q.Processed, q.Failures, q.Skipped, q.Dropped, state)
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if len(r.Groups) > 0 {
		fmt.Fprintln(out)
		w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "GROUP\tSTATE\tPROCESSORS\tFEEDS")
		for _, g := range r.Groups {
			state := g.State
			if fc := g.Fence; fc != nil {
				state += fmt.Sprintf(": processor %s failed on feed %s at position %d (epoch %d): %s", fc.Processor, fc.Feed, fc.Position, fc.Epoch, fc.Error)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", g.Name, state, strings.Join(g.Processors, ","), strings.Join(g.Feeds, ","))
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if len(r.Stores) > 0 {
		fmt.Fprintln(out)
		w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "STORE\tBACKEND\tAPPLIED\tSKIPPED\tSTAGED\tBATCHES\tFAILED COMMITS\tDURABLE POSITIONS")
		for _, s := range r.Stores {
			var ps []string
			for _, p := range s.Positions {
				ps = append(ps, fmt.Sprintf("%s: %d (epoch %d)", p.Feed, p.Position, p.Epoch))
			}
			pos := strings.Join(ps, ", ")
			if s.Failed {
				pos += " FAILED: " + s.LastError
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", s.Name, s.Backend, s.Applied, s.Skipped, s.Staged, s.Commits, s.FailedCommits, pos)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if r.Stopped {
		msg := "the server has stopped"
		if r.StopError != "" {
			msg += ": " + r.StopError
		}
		fmt.Fprintln(out, msg)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(out, "error: %s\n", e)
	}
	return nil
}

func runRelease(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	var rf remoteFlags
	rf.register(fs)
	feedName := fs.String("feed", "", "the feed held")
	consumer := fs.String("consumer", "", "the removed consumer (its group's name)")
	pos, err := parse("release", fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usageErrorf("release", "unexpected arguments %q", pos)
	case rf.addr == "":
		return usageErrorf("release", "release needs --addr HOST:PORT, the server's operator listener")
	case *feedName == "" || *consumer == "":
		return usageErrorf("release", "release needs --feed and --consumer")
	}
	path := "/feeds/" + url.PathEscape(*feedName) + "/release?consumer=" + url.QueryEscape(*consumer)
	body, err := rf.do(http.MethodPost, path)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	var res ops.ReleaseResult
	if err := json.Unmarshal(body, &res); err != nil {
		return fmt.Errorf("release: decode the response of %s: %w", rf.addr, err)
	}
	fmt.Fprintf(stdout, "released the hold of %s on feed %s\n", res.Consumer, res.Feed)
	if res.Status != nil {
		s := res.Status
		state := "running"
		switch {
		case s.Stalled:
			state = "still stalled: " + s.StallReason
		case s.Settled:
			state = "settled"
		}
		fmt.Fprintf(stdout, "feed %s: %s, read %d, pointer %d, %d pending acks\n", s.Name, state, s.ReadPosition, s.PointerPosition, s.PendingAcks)
	}
	return nil
}
