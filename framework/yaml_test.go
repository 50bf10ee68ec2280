package framework_test

import (
	"github.com/stretchr/testify/require"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/framework"
)

// specExample is the spec's configuration, with our processor groups.
const specExample = `eventFeeds:
  - name: orders
    instance: !!com.telamin.mongoose.connector.file.FileEventSource
      filename: data/orders.csv
      readStrategy: COMMITED
    agentName: orders-feed-agent
    overload:
      policy: PAUSE           # the default for a file feed; never drops a line
processorGroups:
  - agentName: orders-agent
    processors: [ledger, audit]
`

func TestLoadConfigSpecExample(t *testing.T) {
	cfg, err := framework.LoadConfig(strings.NewReader(specExample))
	require.NoError(t, err)
	require.Len(t, cfg.Feeds, 1)
	f := cfg.Feeds[0]
	require.Equal(t, "orders", f.Name)
	require.Equal(t, "orders-feed-agent", f.AgentName)
	require.Equal(t, &framework.FileConfig{Filename: "data/orders.csv", ReadStrategy: feed.Committed}, f.File)
	require.Equal(t, framework.Pause, f.Overload.Policy)
	require.Len(t, cfg.Groups, 1)
	require.Equal(t, "orders-agent", cfg.Groups[0].Name)
	require.Equal(t, []string{"ledger", "audit"}, cfg.Groups[0].Processors)
}

func TestLoadConfigAllKeys(t *testing.T) {
	const doc = `drainTimeout: 3s
eventFeeds:
  - name: a
    filename: a.log
    readStrategy: once_earliest
    maxLineBytes: 4096
    overload: {policy: DROP_AFTER_SPIN, spin: 7ms}
    idle: {min: 2ms, max: 20ms}
    queueCapacity: 64
    batchSize: 16
    statusEvents: true
processorGroups:
  - agentName: g
    processors: [p]
    failure: {retries: 5, backoff: 1ms, maxBackoff: 9ms, action: QUARANTINE}
`
	cfg, err := framework.LoadConfig(strings.NewReader(doc))
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, cfg.DrainTimeout)
	f := cfg.Feeds[0]
	require.Equal(t, &framework.FileConfig{Filename: "a.log", ReadStrategy: feed.OnceEarliest, MaxLineBytes: 4096}, f.File)
	require.Equal(t, framework.OverloadConfig{Policy: framework.DropAfterSpin, Spin: 7 * time.Millisecond}, f.Overload)
	require.Equal(t, framework.Backoff{Min: 2 * time.Millisecond, Max: 20 * time.Millisecond}, f.Idle)
	require.Equal(t, 64, f.QueueCapacity)
	require.Equal(t, 16, f.BatchSize)
	require.True(t, f.StatusEvents)
	g := cfg.Groups[0]
	require.Equal(t, 5, g.Failure.Retries)
	require.Equal(t, time.Millisecond, g.Failure.Backoff)
	require.Equal(t, 9*time.Millisecond, g.Failure.MaxBackoff)
	require.Equal(t, framework.Quarantine, g.Failure.Action)
}

func TestLoadConfigErrors(t *testing.T) {
	for name, tc := range map[string]struct{ doc, want string }{
		"unknown top key":      {"eventFeeds: []\nprocessorGrups: []\n", "line 2: field processorGrups not found"},
		"unknown feed key":     {"eventFeeds:\n  - name: a\n    filenam: x\n", "line 3: field filenam not found"},
		"unknown instance key": {"eventFeeds:\n  - name: a\n    instance:\n      path: x\n", "line 4: field path not found"},
		"unknown group key":    {"processorGroups:\n  - agentName: g\n    procs: [a]\n", "line 3: field procs not found"},
		"bad policy":           {"eventFeeds:\n  - name: a\n    filename: x\n    overload: {policy: DROP}\n", `line 4: framework: unknown overload policy "DROP"`},
		"bad strategy":         {"eventFeeds:\n  - name: a\n    filename: x\n    readStrategy: NEWEST\n", `line 4: feed: unknown read strategy "NEWEST"`},
		"bad action":           {"processorGroups:\n  - agentName: g\n    failure: {action: RETRY}\n", `line 3: framework: unknown failure action "RETRY"`},
		"bad duration":         {"drainTimeout: soon\n", "line 1"},
		"both file places":     {"eventFeeds:\n  - name: a\n    filename: x\n    instance: {filename: y}\n", "either in instance or in the feed"},
		"strategy no file":     {"eventFeeds:\n  - name: a\n    readStrategy: EARLIEST\n", "file settings but no filename"},
		"empty":                {"", "empty document"},
		"two documents":        {"drainTimeout: 1s\n---\ndrainTimeout: 2s\n", "more than one YAML document"},
		"not a mapping":        {"- a\n", "line 1"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := framework.LoadConfig(strings.NewReader(tc.doc))
			require.ErrorIs(t, err, framework.ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestLoadConfigFileBindsProcessorsByName(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "orders.csv")
	require.NoError(t, os.WriteFile(input, []byte("a\nb\nc\n"), 0o644))
	doc := strings.Replace(specExample, "data/orders.csv", input, 1)
	doc = strings.Replace(doc, "[ledger, audit]", "[ledger]", 1)
	path := filepath.Join(dir, "server.yaml")
	require.NoError(t, os.WriteFile(path, []byte(doc), 0o644))
	cfg, err := framework.LoadConfigFile(path)
	require.NoError(t, err)
	cfg.Logger = discard()
	p := &recProc{feeds: []string{"orders"}}
	s := startServer(t, cfg, framework.Registry{"ledger": p})
	settle(t, s, "orders")
	stopServer(t, s)
	got := p.all()
	require.Len(t, got, 3)
	require.Equal(t, "c", got[2].line)
	require.EqualValues(t, 6, got[2].d.Position)

	_, err = framework.LoadConfigFile(filepath.Join(dir, "missing.yaml"))
	require.Error(t, err)
	require.NoError(t, os.WriteFile(path, []byte("bogus: 1\n"), 0o644))
	_, err = framework.LoadConfigFile(path)
	require.ErrorContains(t, err, path)
	require.ErrorContains(t, err, "field bogus not found")
}

func FuzzLoadConfig(f *testing.F) {
	f.Add([]byte(specExample))
	f.Add([]byte("eventFeeds: []\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		cfg, err := framework.LoadConfig(strings.NewReader(string(doc)))
		if err != nil {
			return
		}
		// A config that loads makes a server or fails with ErrInvalidConfig;
		// it never panics. Files are not opened by New.
		for i := range cfg.Feeds {
			if cfg.Feeds[i].File != nil {
				cfg.Feeds[i].File.Filename = filepath.Join(t.TempDir(), "in")
			}
		}
		_, _ = framework.New(cfg, framework.Registry{})
	})
}

func TestNewBoundsSizes(t *testing.T) {
	for _, fc := range []framework.FeedConfig{
		{Name: "a", Source: newMemSource(0), BatchSize: framework.MaxBatchSize + 1},
		{Name: "a", Source: newMemSource(0), QueueCapacity: framework.MaxQueueCapacity + 1},
		{Name: "a", Source: newMemSource(0), QueueCapacity: -1},
	} {
		_, err := framework.New(framework.Config{Feeds: []framework.FeedConfig{fc}}, nil)
		require.ErrorIs(t, err, framework.ErrInvalidConfig)
		require.ErrorContains(t, err, "must be within")
	}
}

// A group's store and resume mode come from YAML; retries: 0 means none,
// an absent retries the default.
func TestLoadConfigStoreResumeAndRetries(t *testing.T) {
	const doc = `untilSettled: true
eventFeeds:
  - {name: a, filename: a.log}
processorGroups:
  - agentName: g
    processors: [p]
    store: pebble:data/g
    resume: pointer
    failure: {retries: 0}
  - agentName: h
    processors: [q]
    store: bbolt:data/h
`
	cfg, err := framework.LoadConfig(strings.NewReader(doc))
	require.NoError(t, err)
	require.True(t, cfg.UntilSettled)
	require.Equal(t, "pebble:data/g", cfg.Groups[0].Store)
	require.Equal(t, framework.ResumeFromPointer, cfg.Groups[0].Resume)
	require.Equal(t, framework.NoRetries, cfg.Groups[0].Failure.Retries)
	require.Equal(t, "bbolt:data/h", cfg.Groups[1].Store)
	require.Equal(t, framework.ResumeFromStore, cfg.Groups[1].Resume)
	require.Zero(t, cfg.Groups[1].Failure.Retries, "absent: the default")

	for _, bad := range []struct{ doc, want string }{
		{"processorGroups:\n  - {agentName: g, processors: [p], resume: sometimes}\n", "line 2: framework: unknown resume mode"},
		{"processorGroups:\n  - {agentName: g, processors: [p], failure: {retries: -2}}\n", "retries -2"},
	} {
		_, err := framework.LoadConfig(strings.NewReader(bad.doc))
		require.ErrorIs(t, err, framework.ErrInvalidConfig)
		require.ErrorContains(t, err, bad.want)
	}
}

func TestLoadConfigPointerDir(t *testing.T) {
	cfg, err := framework.LoadConfig(strings.NewReader("eventFeeds:\n  - {name: a, filename: in/a.log, pointerDir: ptrs}\n  - name: b\n    instance: {filename: in/b.log, pointerDir: other}\n"))
	require.NoError(t, err)
	require.Equal(t, "ptrs", cfg.Feeds[0].File.PointerDir)
	require.Equal(t, "other", cfg.Feeds[1].File.PointerDir)
}

func TestLoadConfigRotated(t *testing.T) {
	cfg, err := framework.LoadConfig(strings.NewReader("eventFeeds:\n  - {name: a, filename: in/a.log, rotated: 'a.log.*', rotateWait: 2s}\n  - name: b\n    instance: {filename: in/b.log, rotated: 'old/b.log-*'}\n"))
	require.NoError(t, err)
	require.Equal(t, "a.log.*", cfg.Feeds[0].File.Rotated)
	require.Equal(t, 2*time.Second, cfg.Feeds[0].File.RotateWait)
	require.Equal(t, "old/b.log-*", cfg.Feeds[1].File.Rotated)
	_, err = framework.LoadConfig(strings.NewReader("eventFeeds:\n  - {name: a, rotated: 'a.log.*'}\n"))
	require.ErrorIs(t, err, framework.ErrInvalidConfig)
	require.ErrorContains(t, err, "file settings but no filename")
}
