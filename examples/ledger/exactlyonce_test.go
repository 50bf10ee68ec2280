package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
	"github.com/tidemark-go/tidemark/tidemarktest"
)

// The ledger's processor through the test kit: a crash that re-delivers
// saved lines, then a restart, leaves the balances, the counters and
// output.csv as one run does; without de-duplication it does not.
func TestLedgerProcessorIsExactlyOnce(t *testing.T) {
	var b bytes.Buffer
	if err := Gen(&b, GenOptions{Lines: 400, Accounts: 13, Seed: 3, MalformedEvery: 97}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	observe := func(h *tidemarktest.Harness) any {
		var st LedgerState
		h.View(namespace, func(tx *state.Tx) error {
			var err error
			st, _, err = readLedgerTx(tx)
			return err
		})
		return struct {
			State  LedgerState
			Output string
		}{st, string(h.Output(outputFile))}
	}
	cfg := func(dedupe bool) tidemarktest.Config {
		return tidemarktest.Config{
			Feed:    feedName,
			Group:   groupName,
			Failure: framework.FailurePolicy{Retries: framework.NoRetries},
			Processors: func() framework.Processors {
				return framework.Processors{processorName: &ledger{dedupe: dedupe}}
			},
		}
	}
	for _, backend := range []string{state.Bolt, state.Pebble} {
		c := cfg(true)
		c.Backend = backend
		tidemarktest.CheckExactlyOnce(t, c, lines, []int{0, 57, 200, 399}, observe)
	}

	r := &failures{TB: t}
	tidemarktest.CheckExactlyOnce(r, cfg(false), lines, []int{57}, observe)
	if r.n != 1 {
		t.Fatalf("without de-duplication the test kit saw %d of 1 crash points differ", r.n)
	}
}

// failures counts the errors reported to it.
type failures struct {
	testing.TB
	n int
}

func (f *failures) Errorf(string, ...any) { f.n++ }
