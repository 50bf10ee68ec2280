package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark/state"
)

// PartitionedReport is the outcome of comparing a partitioned ledger's
// stores with its stream.
type PartitionedReport struct {
	Stream     string
	Partitions []*Report // one per partition: its store against its messages
	// Total is the sum of the partitions' stores against the whole stream.
	Total *Report
	// Messages counts the stream's messages; Elsewhere those whose
	// subject names no partition of the stream.
	Messages, Elsewhere int
	// Split lists accounts found in the stores of two partitions: every
	// line of an account must be in one partition.
	Split []string
	// Input is the comparison of the --input files with the stream, when
	// given: lines not published, or published twice.
	Input *PublishReport
}

// PublishReport compares input files with what a stream holds.
type PublishReport struct {
	// Unpublished counts the input's lines (by id) the stream lacks;
	// Twice the stream's lines beyond the input's; Foreign the stream's
	// lines whose id is not in the input.
	Unpublished, Twice, Foreign int
}

// OK reports whether every partition is exact, the totals too, nothing
// is outside the partitions, and the input (if given) was published once.
func (r *PartitionedReport) OK() bool {
	for _, p := range r.Partitions {
		if !p.OK() || p.Twice > 0 || p.Rejects != p.WantRejects {
			return false
		}
	}
	ok := r.Total.OK() && r.Total.Twice == 0 && r.Elsewhere == 0 && len(r.Split) == 0
	if r.Input != nil {
		ok = ok && r.Input.Unpublished == 0 && r.Input.Twice == 0 && r.Input.Foreign == 0
	}
	return ok
}

// Write prints a line per partition, the totals as `check` prints them,
// then what else does not match.
func (r *PartitionedReport) Write(w io.Writer) {
	for i, p := range r.Partitions {
		verdict := "exact"
		if !p.OK() || p.Twice > 0 || p.Rejects != p.WantRejects {
			verdict = "NOT EXACT"
		}
		fmt.Fprintf(w, "partition %d: lines missing %d, written twice %d, applied %d (expected %d), rejected %d (expected %d): %s\n",
			i, p.Missing, p.Twice, p.State.Applied, p.Want.Applied, p.Rejects, p.WantRejects, verdict)
		if verdict != "exact" {
			for _, a := range p.BalanceDiffs() {
				fmt.Fprintf(w, "  balance %s: %d (expected %d)\n", a, p.State.Balances[a], p.Want.Balances[a])
			}
		}
	}
	fmt.Fprintf(w, "all %d partitions of stream %s, %d messages:\n", len(r.Partitions), r.Stream, r.Messages)
	r.Total.Write(w)
	if r.Elsewhere > 0 {
		fmt.Fprintf(w, "messages outside the partitions' subjects: %d\n", r.Elsewhere)
	}
	if len(r.Split) > 0 {
		fmt.Fprintf(w, "accounts in the stores of two partitions: %d, first %s\n", len(r.Split), r.Split[0])
	}
	if in := r.Input; in != nil {
		fmt.Fprintf(w, "input lines not in the stream: %d, published twice: %d, stream lines not in the input: %d\n", in.Unpublished, in.Twice, in.Foreign)
	}
}

// CheckPartitioned compares the stores of the job's partitions in the
// database dsn with the stream's messages, and (when inputs are given)
// the stream with the input files. No worker may hold a store: each is
// opened (its lease taken, then released).
func CheckPartitioned(ctx context.Context, source, dsn, job string, inputs []string) (*PartitionedReport, error) {
	t, err := parseNATS(source)
	if err != nil {
		return nil, fmt.Errorf("--source %w", err)
	}
	nc, js, err := t.connect("tidemark ledger check")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	info, err := lookupStream(ctx, js, t.stream)
	if err != nil {
		return nil, err
	}
	if info == nil {
		return nil, fmt.Errorf("stream %s does not exist", t.stream)
	}
	parts, err := streamPartitions(info, 0)
	if err != nil {
		return nil, err
	}
	r := &PartitionedReport{Stream: t.stream}
	models := make([]*Model, parts)
	for i := range models {
		models[i] = NewModel()
	}
	all := NewModel()
	if err := readStream(ctx, js, info, func(subject string, data []byte) {
		r.Messages++
		p, ok := partitionOfSubject(t.stream, subject)
		if !ok || p >= parts {
			r.Elsewhere++
			return
		}
		models[p].Add(data)
		all.Add(data)
	}); err != nil {
		return nil, err
	}
	sum := LedgerState{Balances: map[string]int64{}}
	sumOut := &OutputSummary{IDs: map[int64]int{}, Last: map[string]int64{}}
	var sumRejects int
	var sumRefused []Refused
	owner := map[string]int{}
	for p := range parts {
		st, out, rejects, refused, err := readPartition(dsn, storeNameOf(job, t.stream, p))
		if err != nil {
			return nil, fmt.Errorf("partition %d: %w", p, err)
		}
		r.Partitions = append(r.Partitions, Compare(models[p], st, out, rejects, refused))
		sum.Applied += st.Applied
		sum.Total += st.Total
		for a, b := range st.Balances {
			if q, ok := owner[a]; ok && q != p {
				r.Split = append(r.Split, fmt.Sprintf("%q in %d and %d", a, q, p))
			}
			owner[a] = p
			sum.Balances[a] += b
		}
		for id, n := range out.IDs {
			sumOut.IDs[id] += n
		}
		for a, b := range out.Last {
			sumOut.Last[a] = b
		}
		sumOut.Lines += out.Lines
		sumOut.Bad += out.Bad
		sumOut.Unfollowed += out.Unfollowed
		sumRejects += rejects
		sumRefused = append(sumRefused, refused...)
	}
	r.Total = Compare(all, sum, sumOut, sumRejects, sumRefused)
	if len(inputs) > 0 {
		in, err := ModelOf(inputs...)
		if err != nil {
			return nil, err
		}
		pr := &PublishReport{}
		pr.Unpublished, pr.Twice, pr.Foreign = countIDs(in.IDs, all.IDs)
		if in.Malformed != all.Malformed {
			pr.Unpublished += max(in.Malformed-all.Malformed, 0)
			pr.Twice += max(all.Malformed-in.Malformed, 0)
		}
		r.Input = pr
	}
	slices.Sort(r.Split)
	return r, nil
}

// readStream calls fn with every message of the stream, in order (an
// ordered consumer: nothing is acknowledged, no consumer is left behind),
// up to the last one info counts. A stream that no longer holds every
// message it stored (interest or work-queue retention, limits, a purge)
// cannot be compared with the stores: that is an error, not a partial
// check.
func readStream(ctx context.Context, js jetstream.JetStream, info *jetstream.StreamInfo, fn func(subject string, data []byte)) error {
	name, ss := info.Config.Name, info.State
	if ss.LastSeq == 0 {
		return nil
	}
	if ss.FirstSeq > 1 || ss.Msgs != ss.LastSeq-ss.FirstSeq+1 {
		return fmt.Errorf("stream %s holds %d of the %d messages it stored (sequences %d to %d): its retention (%s) or a purge removed the others, so the stores cannot be checked against it; check a stream made with --retention limits",
			name, ss.Msgs, ss.LastSeq, ss.FirstSeq, ss.LastSeq, info.Config.Retention)
	}
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := js.Stream(c, name)
	if err != nil {
		return fmt.Errorf("stream %s: %w", name, err)
	}
	cons, err := st.OrderedConsumer(c, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return fmt.Errorf("stream %s: read it: %w", name, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(4096))
	if err != nil {
		return fmt.Errorf("stream %s: read it: %w", name, err)
	}
	defer it.Stop()
	var prev uint64
	for {
		m, err := it.Next(jetstream.NextMaxWait(30 * time.Second))
		if err != nil {
			return fmt.Errorf("stream %s: read it after sequence %d of %d: %w", name, prev, ss.LastSeq, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("stream %s: read it: %w", name, err)
		}
		seq := md.Sequence.Stream
		if seq != prev+1 {
			return fmt.Errorf("stream %s: sequence %d follows %d: messages were removed while the check read it", name, seq, prev)
		}
		prev = seq
		fn(m.Subject(), m.Data())
		if seq >= ss.LastSeq {
			return nil
		}
	}
}

// readPartition reads a partition's store: the ledger's state, its output
// and its rejected lines.
func readPartition(dsn, name string) (LedgerState, *OutputSummary, int, []Refused, error) {
	st, err := state.OpenPostgres(dsn, name, &state.Options{LockTimeout: 5 * time.Second, Logger: discardLogger()})
	if errors.Is(err, state.ErrLocked) {
		err = fmt.Errorf("%w (a worker holds the store: stop the workers, or wait for the lease of one that died, then check)", err)
	}
	if err != nil {
		return LedgerState{}, nil, 0, nil, err
	}
	defer st.Close()
	ls, _, err := readLedger(st.Namespace(namespace))
	if err != nil {
		return ls, nil, 0, nil, err
	}
	var outs [2]bytes.Buffer
	for i, name := range []string{outputFile, rejectsFile} {
		o, err := st.Output(name)
		if err == nil {
			_, err = o.WriteTo(&outs[i])
		}
		if err != nil {
			return ls, nil, 0, nil, fmt.Errorf("output %s: %w", name, err)
		}
	}
	out, err := ReadOutputFrom(&outs[0])
	if err != nil {
		return ls, nil, 0, nil, err
	}
	// Every record counts: one written twice is a line rejected twice.
	records := bytes.Count(outs[1].Bytes(), []byte{'\n'})
	var refused []Refused
	_, _, _, err = readRejects(&outs[1], func(k rejectKey, reason, line string) {
		if e, err := ParseLine([]byte(line)); err == nil {
			refused = append(refused, Refused{Entry: e, Epoch: k.epoch, Position: k.pos, Reason: reason})
		}
	})
	if err != nil {
		return ls, nil, 0, nil, err
	}
	return ls, out, records, refused, nil
}

func checkPartitionedCmd(source, store, job string, inputs []string, stdout, stderr io.Writer) int {
	r, err := CheckPartitioned(context.Background(), source, store, job, inputs)
	if err != nil {
		fmt.Fprintln(stderr, "ledger check:", err)
		return 1
	}
	r.Write(stdout)
	if !r.OK() {
		return 1
	}
	return 0
}
