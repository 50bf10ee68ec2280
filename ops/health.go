package ops

import (
	"fmt"
	"io"
	"strings"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/framework"
)

// Health is the readiness of a server, computed from a [Report]: one
// [Check] per feed, group and store, and one for the server itself once it
// has stopped. GET /readyz serves it, and tidemark status --check computes
// it from GET /status, with [Report.Health] both.
type Health struct {
	Checks []Check
}

// Check is one thing readiness looks at, and what is wrong with it.
type Check struct {
	// Name names it: "server", "feed orders", "group ledger-agent",
	// "store ledger", or "status" for a part of the report that could not
	// be read.
	Name string `json:"name"`
	// Problem says why it is not ready, and what to do; empty when it is.
	Problem string `json:"problem,omitempty"`
	// Note says more about a ready one (a feed waiting for its input).
	Note string `json:"note,omitempty"`
}

// OK reports whether the check passed.
func (c Check) OK() bool { return c.Problem == "" }

// String is "NAME: PROBLEM" for a failed check, "NAME ok" for a passed
// one.
func (c Check) String() string {
	if c.OK() {
		return c.Name + " ok"
	}
	return c.Name + ": " + c.Problem
}

// Ready reports whether every check passed.
func (h Health) Ready() bool { return len(h.Problems()) == 0 }

// Problems returns the checks that failed.
func (h Health) Problems() []Check {
	var bad []Check
	for _, c := range h.Checks {
		if !c.OK() {
			bad = append(bad, c)
		}
	}
	return bad
}

// Health computes the readiness the report shows. The server is ready
// when it has not stopped, every feed has started reading and is not
// stopped, stalled or failing to write its pointer, no group is dead,
// fenced or restarting, no store has failed (a commit, or the check of its
// file), and every part of the report could be read. A feed waiting for
// its input to appear is ready (a note says so): it reads the input as
// soon as it exists.
func (r Report) Health() Health {
	var h Health
	if r.Stopped {
		p := "has stopped"
		if r.StopError != "" {
			p += ": " + r.StopError
		}
		h.Checks = append(h.Checks, Check{Name: "server", Problem: p + "; restart the process"})
	}
	for _, f := range r.Feeds {
		h.Checks = append(h.Checks, feedCheck(f, r.Groups == nil))
	}
	for _, g := range r.Groups {
		h.Checks = append(h.Checks, groupCheck(g))
	}
	for _, s := range r.Stores {
		c := Check{Name: "store " + s.Name}
		switch {
		case s.Failed && s.FailedCommits > 0:
			c.Problem = "failed a commit: " + s.LastError + "; it declares nothing durable any more: restart the process"
		case s.Failed: // the check of its file found damage
			c.Problem = "has failed: " + s.LastError + "; it declares nothing durable any more"
		}
		h.Checks = append(h.Checks, c)
	}
	for _, e := range r.Errors {
		h.Checks = append(h.Checks, Check{Name: "status", Problem: e})
	}
	return h
}

// feedCheck is a feed's check. queues says whether to look at its queues'
// fences, for a report without groups.
func feedCheck(f FeedReport, queues bool) Check {
	c := Check{Name: "feed " + f.Name}
	var bad []string
	switch f.State {
	case feed.StateStarting.String():
		bad = append(bad, "has not started reading yet")
	case feed.StateStopped.String():
		bad = append(bad, "is stopped: its source is closed")
	case feed.StateWaiting.String():
		c.Note = strings.TrimSpace("waiting for its input to appear " + f.Path)
	}
	if f.Stalled {
		bad = append(bad, "stalled: "+f.StallReason)
	}
	if f.LastPointerError != "" {
		bad = append(bad, "its pointer write fails, so it cannot commit: "+f.LastPointerError)
	}
	if queues {
		for _, q := range f.Groups {
			if q.Fenced && !q.Removed {
				bad = append(bad, "group "+q.Group+" is fenced or dead")
			}
		}
	}
	c.Problem = strings.Join(bad, "; ")
	return c
}

func groupCheck(g GroupReport) Check {
	c := Check{Name: "group " + g.Name}
	switch framework.GroupState(g.State) {
	case framework.GroupDead:
		c.Problem = "is dead: a restart of its processors failed; its feeds pause until it is removed or the process restarts"
	case framework.GroupFenced:
		c.Problem = "is fenced"
		if fc := g.Fence; fc != nil {
			c.Problem += fmt.Sprintf(": processor %s failed on feed %s at epoch %d, position %d: %s", fc.Processor, fc.Feed, fc.Epoch, fc.Position, fc.Error)
		}
		c.Problem += "; its feeds pause until the fence is lifted, or the processor or group is removed or restarted"
	case framework.GroupRestarting:
		c.Problem = "is restarting its processors"
	}
	return c
}

// writeReadiness writes the body of /readyz: a line per check, "[+]" for
// a passed one and "[-]" for a failed one, then the verdict. With details
// false, only the verdict.
func writeReadiness(w io.Writer, h Health, details bool) {
	var sb strings.Builder
	if details {
		for _, c := range h.Checks {
			mark := "[+]"
			if !c.OK() {
				mark = "[-]"
			}
			sb.WriteString(mark + c.String())
			if c.OK() && c.Note != "" {
				sb.WriteString(": " + c.Note)
			}
			sb.WriteByte('\n')
		}
	}
	if h.Ready() {
		sb.WriteString("readyz check passed\n")
	} else {
		fmt.Fprintf(&sb, "readyz check failed: %d of %d checks\n", len(h.Problems()), len(h.Checks))
		if !details {
			sb.WriteString("send the listener's token for the reasons\n")
		}
	}
	_, _ = io.WriteString(w, sb.String())
}
