package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A partitioned ledger stream. `ledger publish` makes it and fills it;
// `ledger run --source` and `ledger check --source` read it.
//
//	name         STREAM (the last part of the --source/--to URL)
//	subjects     STREAM.KEY, as published: KEY is the line's account as a
//	             subject token (see accountKey)
//	stored as    STREAM.P by the stream's subject transform
//	             STREAM.* -> STREAM.{{partition(N,1)}}: every line of an
//	             account is in the same partition P
//	metadata     tidemark_partitions: N
//
// Each message is one ledger line, without its newline.
//
// The stored subject is the partition alone, not STREAM.P.KEY: a consumer
// whose filter has a wildcard (STREAM.P.>) makes nats-server walk every
// subject of a message block for each message it delivers (its file
// store's firstMatching), which at 1,000 accounts cut a partition's
// delivery rate to a third (bench/scale). A literal filter (STREAM.P) is
// one lookup. A stream made by an earlier `ledger publish` (STREAM.P.KEY)
// is still read, through the filter STREAM.P.>.

// partitionsMeta is the stream's metadata key that holds its partition
// count.
const partitionsMeta = "tidemark_partitions"

// natsTarget is a parsed nats://HOST:PORT[,HOST:PORT...]/STREAM.
type natsTarget struct {
	urls   string // for nats.Connect: nats://HOST:PORT, comma-separated
	stream string
}

// parseNATS parses a --source or --to value.
func parseNATS(s string) (natsTarget, error) {
	rest, ok := strings.CutPrefix(s, "nats://")
	if !ok {
		return natsTarget{}, fmt.Errorf("%q: want nats://HOST:PORT/STREAM", s)
	}
	hosts, stream, ok := strings.Cut(rest, "/")
	if !ok || hosts == "" || stream == "" || strings.ContainsAny(stream, "/.*> \t") {
		return natsTarget{}, fmt.Errorf("%q: want nats://HOST:PORT/STREAM (several servers: nats://H1:P1,H2:P2/STREAM); a stream name has no dots, slashes or wildcards", s)
	}
	var urls []string
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			return natsTarget{}, fmt.Errorf("%q: an empty server in the list", s)
		}
		urls = append(urls, "nats://"+strings.TrimPrefix(h, "nats://"))
	}
	return natsTarget{urls: strings.Join(urls, ","), stream: stream}, nil
}

// connect connects to the target's servers for good: reconnects forever.
func (t natsTarget) connect(name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(t.urls,
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.RetryOnFailedConnect(false),
		nats.Timeout(5*time.Second),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", t.urls, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// filterOf is partition p's subjects: STREAM.P, or STREAM.P.> in a stream
// whose stored subjects keep the key (keyed, see keyedSubjects).
func filterOf(stream string, p int, keyed bool) string {
	if keyed {
		return fmt.Sprintf("%s.%d.>", stream, p)
	}
	return fmt.Sprintf("%s.%d", stream, p)
}

// keyedSubjects reports whether the stream of info stores its subjects as
// STREAM.P.KEY (made by an earlier ledger publish) rather than STREAM.P.
func keyedSubjects(info *jetstream.StreamInfo) bool {
	tr := info.Config.SubjectTransform
	return tr != nil && strings.Contains(tr.Destination, "{{wildcard(1)}}")
}

// partitionOfSubject returns the partition of a stored subject STREAM.P
// (or STREAM.P.KEY).
func partitionOfSubject(stream, subject string) (int, bool) {
	rest, ok := strings.CutPrefix(subject, stream+".")
	if !ok {
		return 0, false
	}
	ps, _, _ := strings.Cut(rest, ".")
	p, err := strconv.Atoi(ps)
	return p, err == nil && p >= 0
}

// accountKey is the subject token of an account: the account itself when
// it is made of letters, digits, '-' and '_', else "x" and its bytes in
// hex. Only the partition depends on it, so two accounts that map to one
// key share a partition, nothing more.
func accountKey(account []byte) string {
	if len(account) > 0 && len(account) <= 64 {
		ok := true
		for _, c := range account {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				ok = false
				break
			}
		}
		if ok {
			return string(account)
		}
	}
	if len(account) > 64 {
		account = account[:64] // still one key per account prefix: one partition
	}
	return "x" + hex.EncodeToString(account)
}

// keyOfLine returns the subject token of a line: its account's key, or
// "_" for a line without an account field (it is rejected wherever it
// lands).
func keyOfLine(line []byte) string {
	i := strings.IndexByte(string(line), ',')
	if i < 0 {
		return "_"
	}
	rest := line[i+1:]
	j := strings.IndexByte(string(rest), ',')
	if j <= 0 {
		return "_"
	}
	return accountKey(rest[:j])
}

// streamConfig is the stream `ledger publish` makes.
func streamConfig(name string, partitions, replicas int, retention jetstream.RetentionPolicy) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        name,
		Description: "a tidemark ledger, partitioned by account",
		Subjects:    []string{name + ".*"},
		SubjectTransform: &jetstream.SubjectTransformConfig{
			Source:      name + ".*",
			Destination: fmt.Sprintf("%s.{{partition(%d,1)}}", name, partitions),
		},
		Retention: retention,
		Storage:   jetstream.FileStorage,
		Replicas:  replicas,
		Metadata:  map[string]string{partitionsMeta: strconv.Itoa(partitions)},
	}
}

var partitionRE = regexp.MustCompile(`\{\{\s*partition\(\s*(\d+)\s*,`)

// streamPartitions returns the partition count of an existing stream: its
// metadata's, checked against its subject transform. want, when not 0, is
// what the flag said.
func streamPartitions(info *jetstream.StreamInfo, want int) (int, error) {
	name := info.Config.Name
	tr := info.Config.SubjectTransform
	if tr == nil {
		return 0, fmt.Errorf("stream %s has no subject transform, so it is not partitioned: make it with ledger publish --partitions N (into a new stream)", name)
	}
	m := partitionRE.FindStringSubmatch(tr.Destination)
	if m == nil {
		return 0, fmt.Errorf("stream %s: its subject transform %q -> %q has no partition(N, ...): make a partitioned stream with ledger publish --partitions N", name, tr.Source, tr.Destination)
	}
	n, _ := strconv.Atoi(m[1])
	if v, ok := info.Config.Metadata[partitionsMeta]; ok && v != m[1] {
		return 0, fmt.Errorf("stream %s: its metadata says %s partitions, its subject transform %d", name, v, n)
	}
	if want != 0 && want != n {
		return 0, fmt.Errorf("stream %s has %d partitions, --partitions says %d: the count is fixed for the life of a stream (a new count is a new stream)", name, n, want)
	}
	return n, nil
}

// lookupStream returns the stream's info, or nil when it does not exist.
func lookupStream(ctx context.Context, js jetstream.JetStream, name string) (*jetstream.StreamInfo, error) {
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := js.Stream(c, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	return st.CachedInfo(), nil
}
