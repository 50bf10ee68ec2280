package framework_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// damageMarker is the value markProc writes: the test finds it in the
// bbolt file to damage it.
const damageMarker = "tidemark-test-value-to-damage"

// markProc applies every line to its group's store, putting damageMarker
// under key "k".
type markProc struct{ st state.Store }

func (p *markProc) Start(_ context.Context, fc *framework.Context) error {
	st, err := fc.Store()
	if err != nil {
		return err
	}
	p.st = st
	return fc.Subscribe("orders")
}

func (p *markProc) Handle(ctx context.Context, d tidemark.Delivery, _ []byte) error {
	_, err := p.st.Apply(ctx, d, func(tx *state.Tx) error { return tx.Put([]byte("k"), []byte(damageMarker)) })
	return err
}

func (p *markProc) Stop(context.Context) error { return nil }

// TestIdleServerStopsWhenItsStoreFails: a bbolt file larger than
// VerifyMaxBytes is checked in the background while the server runs. When
// the check finds damage and the feed is idle (every line applied, the
// feed following its file), the server stops at once, without waiting for
// a line: Run returns an error that names the group, the store, the
// damaged file and what to do, and the ERROR log says the same.
func TestIdleServerStopsWhenItsStoreFails(t *testing.T) {
	dir, data := t.TempDir(), filepath.Join(t.TempDir(), "state")
	input := filepath.Join(dir, "orders.csv")
	writeLines(t, input, 1, 20)
	cfg := fileCfg(input)
	cfg.Groups = []framework.GroupConfig{{Name: "g", Processors: []string{"p"}, Store: "bbolt:" + data}}
	cfg.UntilSettled = true
	require.NoError(t, run(t, cfg, framework.Processors{"p": &markProc{}}))

	// Damage the stored value (every copy of it in the file: bbolt leaves
	// old pages behind): the check of the file finds a value whose
	// checksum does not verify; bbolt itself sees nothing.
	file := filepath.Join(data, "state.bolt")
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	n := bytes.Count(b, []byte(damageMarker))
	require.NotZero(t, n, "the value is not in %s", file)
	b = bytes.ReplaceAll(b, []byte(damageMarker), []byte(strings.ToUpper(damageMarker)))
	require.NoError(t, os.WriteFile(file, b, 0o600))

	// The same input, all applied: the feed follows it and has nothing
	// to read. The file is larger than VerifyMaxBytes: checked while the
	// server runs. The check may also end before the open does (the open's
	// reads then fail, and New returns the damage, named): the test opens
	// a fresh copy of the folder until the server starts.
	var logs logBuf
	cfg.UntilSettled = false
	cfg.Groups[0].StoreOptions = &state.Options{VerifyMaxBytes: 1}
	var s *framework.Server
	for attempt := 1; s == nil; attempt++ {
		try := filepath.Join(t.TempDir(), "state")
		copyDir(t, data, try)
		data, file = try, filepath.Join(try, "state.bolt")
		cfg.Groups[0].Store = "bbolt:" + data
		logs.reset()
		cfg.Logger = logs.logger()
		s, err = framework.New(cfg, framework.Processors{"p": &markProc{}})
		if err != nil {
			require.ErrorIs(t, err, state.ErrCorrupt, "New")
			require.ErrorContains(t, err, file)
			require.Less(t, attempt, 20, "the check ended before the open every time: %v", err)
			s = nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	err = s.Run(ctx)
	require.NoError(t, ctx.Err(), "Run returned only when its context ended: the server ran on with its store failed (%v)", err)
	require.ErrorIs(t, err, state.ErrCorrupt)
	require.ErrorIs(t, err, state.ErrFailed)
	for _, want := range []string{`group "g"`, "bbolt:" + data, file, "backup"} {
		require.Contains(t, err.Error(), want)
	}
	var ce *state.CorruptError
	require.True(t, errors.As(err, &ce), "%v", err)
	log := logs.String()
	require.Contains(t, log, "level=ERROR")
	require.Contains(t, log, `group \"g\"`)
	require.Contains(t, log, file)
	require.NotContains(t, log, "fatal error", "an operator takes it for a crash of the Go runtime")
}

// The ERROR log of an error that stops the server says what failed, where
// (the group, processor, feed and position; the feed that cannot read),
// and what to do; never "fatal error", which an operator takes for a
// crash of the Go runtime.
func TestFatalErrorLogSaysWhatFailedAndWhatToDo(t *testing.T) {
	t.Run("processor", func(t *testing.T) {
		src := newMemSource(10)
		var logs logBuf
		cfg := storeCfg(&resumable{memSource: src}, "bbolt:"+filepath.Join(t.TempDir(), "state"))
		cfg.Logger = logs.logger()
		c := &counter{feed: "orders", fail: func(d tidemark.Delivery) error {
			if d.Position == src.pos(4) {
				return framework.Fatal(errors.New("the accounts database is gone"))
			}
			return nil
		}}
		err := run(t, cfg, framework.Processors{"c": c})
		require.ErrorContains(t, err, "the accounts database is gone")
		line := errorLine(t, &logs, "the accounts database is gone")
		for _, want := range []string{"msg=\"processor failed on a line", "group=g", "processor=c", "feed=orders", "epoch=" + strconv.FormatUint(src.epoch, 10),
			"position=" + strconv.FormatInt(src.pos(4), 10), "fix the cause", "start the server again", "read again"} {
			require.Contains(t, line, want)
		}
	})
	t.Run("feed", func(t *testing.T) {
		var logs logBuf
		cfg := framework.Config{
			Feeds:        []framework.FeedConfig{{Name: "orders", Source: failingSource{newMemSource(10)}, Overload: framework.OverloadConfig{Policy: framework.Pause}}},
			Groups:       []framework.GroupConfig{{Name: "g", Processors: []string{"p"}}},
			Logger:       logs.logger(),
			UntilSettled: true,
		}
		require.Error(t, run(t, cfg, framework.Processors{"p": &recProc{feeds: []string{"orders"}}}))
		line := errorLine(t, &logs, "lost messages 10..20")
		for _, want := range []string{"msg=\"feed cannot read its source", "feed=orders", "fix the input", "start the server again"} {
			require.Contains(t, line, want)
		}
	})
}

// errorLine returns the ERROR line of logs that holds what, failing t
// unless there is one, or if any line says "fatal error".
func errorLine(t *testing.T, logs *logBuf, what string) string {
	t.Helper()
	all := logs.String()
	require.NotContains(t, all, "fatal error", "an operator takes it for a crash of the Go runtime")
	for l := range strings.Lines(all) {
		if strings.Contains(l, "level=ERROR") && strings.Contains(l, what) {
			return l
		}
	}
	t.Fatalf("no ERROR line says %q:\n%s", what, all)
	return ""
}

// copyDir copies the regular files of folder from into the new folder to.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(to, 0o755))
	ents, err := os.ReadDir(from)
	require.NoError(t, err)
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(to, e.Name()), b, 0o600))
	}
}
