package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// PublishOptions are the flags of `ledger publish`.
type PublishOptions struct {
	Input      string
	To         string // nats://HOST:PORT/STREAM
	Partitions int    // for a new stream
	Replicas   int
	Retention  string // limits, interest or workqueue
	// Window is how many messages are in flight (published, not yet
	// acknowledged by the server) at once.
	Window int
	// Pace is a pause after each line, for demonstrations and tests.
	Pace time.Duration
}

func cmdPublish(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("publish", stderr, "usage: ledger publish --input PATH --to nats://HOST:PORT/STREAM [--partitions N] [--replicas R] [--retention limits|interest|workqueue] [--pace D]")
	var o PublishOptions
	fs.StringVar(&o.Input, "input", "", "the ledger file to publish, one message a line (required)")
	fs.StringVar(&o.To, "to", "", "the stream: nats://HOST:PORT/STREAM (several servers: nats://H1:P1,H2:P2/STREAM) (required)")
	fs.IntVar(&o.Partitions, "partitions", 0, "the partition count of a new stream (required when the stream does not exist; fixed for its life)")
	fs.IntVar(&o.Replicas, "replicas", 1, "replicas of a new stream (3 on a cluster: exactly once needs R3 or a server run with sync_interval: always)")
	fs.StringVar(&o.Retention, "retention", "limits", "retention of a new stream: limits, interest or workqueue")
	fs.IntVar(&o.Window, "window", 512, "messages in flight at once")
	fs.DurationVar(&o.Pace, "pace", 0, "sleep this long after each line, for demonstrations")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if o.Input == "" || o.To == "" || fs.NArg() > 0 || o.Partitions < 0 || o.Replicas < 1 || o.Window < 1 || o.Pace < 0 {
		fs.Usage()
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	n, err := Publish(ctx, o, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "ledger publish:", err)
		return exitFailed
	}
	fmt.Fprintf(stdout, "published %d lines to %s\n", n, o.To)
	return exitOK
}

// retentionOf parses --retention.
func retentionOf(s string) (jetstream.RetentionPolicy, error) {
	switch strings.ToLower(s) {
	case "limits":
		return jetstream.LimitsPolicy, nil
	case "interest":
		return jetstream.InterestPolicy, nil
	case "workqueue", "work-queue":
		return jetstream.WorkQueuePolicy, nil
	}
	return 0, fmt.Errorf("--retention %q: want limits, interest or workqueue", s)
}

// Publish publishes every complete line of o.Input to the stream, made
// (partitioned) if it does not exist, and returns how many it published.
// Each message carries a message id made of the input's identity and the
// line's offset, so that a publish retried within the stream's duplicate
// window (two minutes by default) stores each line once.
func Publish(ctx context.Context, o PublishOptions, stderr io.Writer) (int64, error) {
	t, err := parseNATS(o.To)
	if err != nil {
		return 0, fmt.Errorf("--to %w", err)
	}
	ret, err := retentionOf(o.Retention)
	if err != nil {
		return 0, err
	}
	f, err := os.Open(o.Input)
	if err != nil {
		return 0, fmt.Errorf("input: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	nc, js, err := t.connect("tidemark ledger publish")
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	info, err := lookupStream(ctx, js, t.stream)
	if err != nil {
		return 0, err
	}
	if info == nil {
		if o.Partitions < 1 {
			return 0, fmt.Errorf("stream %s does not exist: give --partitions N to make it (the count is fixed for its life)", t.stream)
		}
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := js.CreateStream(c, streamConfig(t.stream, o.Partitions, o.Replicas, ret))
		cancel()
		if err != nil {
			return 0, fmt.Errorf("create stream %s: %w", t.stream, err)
		}
		fmt.Fprintf(stderr, "ledger publish: made stream %s: %d partitions, %d replicas, %s retention\n", t.stream, o.Partitions, o.Replicas, ret)
	} else if _, err := streamPartitions(info, o.Partitions); err != nil {
		return 0, err
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s %d %d", o.Input, fi.Size(), fi.ModTime().UnixNano())
	id := strconv.FormatUint(h.Sum64(), 36)
	return publishLines(ctx, js, t.stream, f, id, o.Window, o.Pace)
}

// pending is a message published and not yet acknowledged.
type pending struct {
	subject, id string
	data        []byte
	ack         jetstream.PubAckFuture
}

// publishLines publishes r's complete lines asynchronously, window at a
// time, and waits for every acknowledgement; a message whose
// acknowledgement does not come is published again, with the same id.
func publishLines(ctx context.Context, js jetstream.JetStream, stream string, r io.Reader, id string, window int, pace time.Duration) (int64, error) {
	var inflight []pending
	var n int64
	send := func(p *pending) error {
		for attempt := 0; ; attempt++ {
			ack, err := js.PublishAsync(p.subject, p.data, jetstream.WithMsgID(p.id))
			if err == nil {
				p.ack = ack
				return nil
			}
			if attempt >= 600 || ctx.Err() != nil {
				return fmt.Errorf("publish %s: %w", p.id, errors.Join(err, ctx.Err()))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// settle waits for the acknowledgements of the messages in flight,
	// within 5 s for all of them, and publishes again those that failed
	// or did not come (after a server restart, say), until none is left.
	settle := func() error {
		for attempt := 0; ; attempt++ {
			timeout := time.NewTimer(5 * time.Second)
			expired := false
			var failed []pending
			var lastErr error
			for _, p := range inflight {
				var err error
				if expired {
					select {
					case <-p.ack.Ok():
					case err = <-p.ack.Err():
					default:
						err = errors.New("no acknowledgement within 5s")
					}
				} else {
					select {
					case <-p.ack.Ok():
					case err = <-p.ack.Err():
					case <-timeout.C:
						expired = true
						err = errors.New("no acknowledgement within 5s")
					case <-ctx.Done():
						timeout.Stop()
						return ctx.Err()
					}
				}
				if err != nil {
					failed, lastErr = append(failed, p), err
				} else {
					n++
				}
			}
			timeout.Stop()
			inflight = append(inflight[:0], failed...)
			if len(inflight) == 0 {
				return nil
			}
			if attempt >= 120 {
				return fmt.Errorf("publish %d lines (the first of id %s): %w", len(inflight), inflight[0].id, lastErr)
			}
			time.Sleep(250 * time.Millisecond)
			for i := range inflight {
				if err := send(&inflight[i]); err != nil {
					return err
				}
			}
		}
	}
	var off int64
	var failed error
	err := eachLine(r, func(payload []byte, end int64) {
		start := off
		off = end
		if failed != nil {
			return
		}
		if failed = ctx.Err(); failed != nil {
			return
		}
		p := pending{
			subject: stream + "." + keyOfLine(payload),
			id:      id + ":" + strconv.FormatInt(start, 10),
			data:    append([]byte(nil), payload...),
		}
		if failed = send(&p); failed != nil {
			return
		}
		inflight = append(inflight, p)
		if len(inflight) >= window {
			failed = settle()
		}
		if pace > 0 {
			time.Sleep(pace)
		}
	}, new(int64))
	if err = errors.Join(err, failed); err != nil {
		return n, err
	}
	return n, settle()
}
