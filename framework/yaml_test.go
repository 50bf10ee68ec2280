package framework_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
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

// exampleFile is the complete commented example config of the docs.
var exampleFile = filepath.Join("testdata", "example.yaml")

// The documented example loads, and every value it gives is the default:
// the Config it makes is the one the defaults make.
func TestLoadConfigExample(t *testing.T) {
	cfg, err := framework.LoadConfigFile(exampleFile)
	require.NoError(t, err)
	want := framework.Config{
		LogLevel:     slog.LevelInfo,
		DrainTimeout: framework.DefaultDrainTimeout,
		Feeds: []framework.FeedConfig{{
			Name: "orders",
			File: &framework.FileConfig{
				Filename:     "data/orders.csv",
				ReadStrategy: feed.Committed,
				MaxLineBytes: feed.DefaultMaxLineBytes,
				Sync:         feed.SyncEveryCommit,
				SyncInterval: feed.DefaultSyncInterval,
			},
			Overload:      framework.OverloadConfig{Policy: framework.Pause, Spin: framework.DefaultSpin},
			Idle:          framework.Backoff{Min: time.Millisecond, Max: 50 * time.Millisecond},
			QueueCapacity: framework.DefaultQueueCapacity,
			BatchSize:     framework.DefaultBatchSize,
		}},
		Groups: []framework.GroupConfig{{
			Name:       "orders-agent",
			Processors: []string{"ledger"},
			Failure: framework.FailurePolicy{
				Retries: framework.DefaultRetries, Backoff: framework.DefaultBackoff,
				MaxBackoff: framework.DefaultMaxBackoff, Action: framework.Skip,
			},
			Store: "bbolt:data/orders",
			StoreOptions: &state.Options{
				BatchSize: state.DefaultBatchSize, BatchInterval: state.DefaultBatchInterval, LockTimeout: state.DefaultLockTimeout,
				CacheSize: state.DefaultCacheSize,
			},
			Resume: framework.ResumeFromStore,
		}},
	}
	require.Equal(t, want, cfg)
	require.Equal(t, framework.Backoff{}.Idle(0), cfg.Feeds[0].Idle.Idle(0), "the example's idle.min is the default")
	require.Equal(t, framework.Backoff{}.Idle(100), cfg.Feeds[0].Idle.Idle(100), "the example's idle.max is the default")

	// The docs point to it.
	for _, doc := range []struct{ file, ref string }{
		{filepath.Join("..", "README.md"), "framework/testdata/example.yaml"},
		{"doc.go", "testdata/example.yaml"},
		{"yaml.go", "testdata/example.yaml"},
	} {
		b, err := os.ReadFile(doc.file)
		require.NoError(t, err)
		require.Contains(t, string(b), doc.ref, "%s points to the example", doc.file)
	}

	// A server made from it runs (here on a temporary folder).
	dir := t.TempDir()
	cfg.Feeds[0].File.Filename = filepath.Join(dir, "orders.csv")
	cfg.Groups[0].Store = "bbolt:" + filepath.Join(dir, "state")
	cfg.Logger = discard()
	require.NoError(t, os.WriteFile(cfg.Feeds[0].File.Filename, []byte("a\nb\n"), 0o644))
	s := startServer(t, cfg, framework.Processors{"ledger": &recProc{feeds: []string{"orders"}}})
	settle(t, s, "orders")
	stopServer(t, s)
}

// yamlKeys returns every key path of the YAML schema, as
// "eventFeeds[].instance.filename", by reading the keys of a document that
// gives them all (everyKey), and checks them against the decoder's own
// list by loading a document with one unknown key per mapping.
func schemaKeys(t *testing.T, doc string) []string {
	t.Helper()
	var root yaml.Node
	require.NoError(t, yaml.Unmarshal([]byte(doc), &root))
	var keys []string
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			walk(n.Content[0], path)
		case yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, path+"[]")
			}
		case yaml.MappingNode:
			for i := 0; i < len(n.Content); i += 2 {
				k := strings.TrimPrefix(path+"."+n.Content[i].Value, ".")
				if !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
				walk(n.Content[i+1], k)
			}
		}
	}
	walk(&root, "")
	return keys
}

// validKeys returns the keys the loader takes in the mapping at path of
// doc, from its error for an unknown key put there.
func validKeys(t *testing.T, doc, path string) []string {
	t.Helper()
	_, err := framework.LoadConfig(strings.NewReader(doc))
	var ce *framework.ConfigError
	require.ErrorAs(t, err, &ce, path)
	m := regexp.MustCompile(`\(valid: (.*)\)$`).FindStringSubmatch(ce.Msg)
	require.NotNil(t, m, ce.Msg)
	return strings.Split(m[1], ", ")
}

// everyKey sets every key of the schema to a value that is not its
// default (and the file settings once in the feed, once in an instance).
const everyKey = `logLevel: debug
drainTimeout: 3s
untilSettled: true
operator:
  addr: 127.0.0.1:9464
  token: secret
  allowedHosts: [tidemark.example.net]
  maxConns: 7
  readHeaderTimeout: 1s
  readTimeout: 2s
  writeTimeout: 3s
  idleTimeout: 4s
  watch: 5s
  refresh: 6s
eventFeeds:
  - name: a
    filename: a.log
    readStrategy: once_earliest
    maxLineBytes: 4096
    pointerDir: ptr
    rotated: a.log.*
    rotateWait: 2s
    sync: interval
    syncInterval: 250ms
    syncCommit: true
    agentName: a-agent
    overload: {policy: DROP_AFTER_SPIN, spin: 7ms}
    idle: {min: 2ms, max: 20ms}
    queueCapacity: 64
    batchSize: 16
    statusEvents: true
  - name: b
    instance:
      filename: b.log
      readStrategy: LATEST
      maxLineBytes: 100
      pointerDir: ptr-b
      rotated: b.log-*
      rotateWait: -1s
      sync: NEVER
      syncInterval: 1s
      syncCommit: true
  - name: c
    paths: [logs/*.log, more/*.log]
    exclude: [debug-*]
    forgetAfter: 30m
    pointerDir: ptr-c
  - name: d
    instance:
      paths: [d/*.log]
      exclude: ["*.gz"]
      forgetAfter: 1s
      pointerDir: ptr-d
      rotated: "{name}.*"
processorGroups:
  - agentName: g
    processors: [p, q]
    failure: {retries: 5, backoff: 1ms, maxBackoff: 9ms, action: QUARANTINE}
    store: pebble:data/g
    storeOptions: {sync: true, batchSize: 10, batchInterval: 1ms, lockTimeout: 1s, cacheSize: 1048576}
    resume: POINTER
`

// Every key, set to a value that is not its default, reaches the Config.
func TestLoadConfigEveryKey(t *testing.T) {
	cfg, err := framework.LoadConfig(strings.NewReader(everyKey))
	require.NoError(t, err)
	want := framework.Config{
		LogLevel:     slog.LevelDebug,
		DrainTimeout: 3 * time.Second,
		UntilSettled: true,
		Operator: &framework.OperatorConfig{
			Addr: "127.0.0.1:9464", Token: "secret", AllowedHosts: []string{"tidemark.example.net"}, MaxConns: 7,
			ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 3 * time.Second,
			IdleTimeout: 4 * time.Second, Watch: 5 * time.Second, Refresh: 6 * time.Second,
		},
		Feeds: []framework.FeedConfig{{
			Name: "a",
			File: &framework.FileConfig{
				Filename: "a.log", ReadStrategy: feed.OnceEarliest, MaxLineBytes: 4096, PointerDir: "ptr",
				Rotated: "a.log.*", RotateWait: 2 * time.Second, Sync: feed.SyncInterval,
				SyncInterval: 250 * time.Millisecond, SyncCommit: true,
			},
			AgentName:     "a-agent",
			Overload:      framework.OverloadConfig{Policy: framework.DropAfterSpin, Spin: 7 * time.Millisecond},
			Idle:          framework.Backoff{Min: 2 * time.Millisecond, Max: 20 * time.Millisecond},
			QueueCapacity: 64,
			BatchSize:     16,
			StatusEvents:  true,
		}, {
			Name: "b",
			File: &framework.FileConfig{
				Filename: "b.log", ReadStrategy: feed.Latest, MaxLineBytes: 100, PointerDir: "ptr-b",
				Rotated: "b.log-*", RotateWait: -time.Second, Sync: feed.SyncNever,
				SyncInterval: time.Second, SyncCommit: true,
			},
		}, {
			Name: "c",
			File: &framework.FileConfig{
				Paths: []string{"logs/*.log", "more/*.log"}, Exclude: []string{"debug-*"}, ForgetAfter: 30 * time.Minute, PointerDir: "ptr-c",
			},
		}, {
			Name: "d",
			File: &framework.FileConfig{
				Paths: []string{"d/*.log"}, Exclude: []string{"*.gz"}, ForgetAfter: time.Second, PointerDir: "ptr-d", Rotated: "{name}.*",
			},
		}},
		Groups: []framework.GroupConfig{{
			Name:       "g",
			Processors: []string{"p", "q"},
			Failure: framework.FailurePolicy{
				Retries: 5, Backoff: time.Millisecond, MaxBackoff: 9 * time.Millisecond, Action: framework.Quarantine,
			},
			Store:        "pebble:data/g",
			StoreOptions: &state.Options{Sync: true, BatchSize: 10, BatchInterval: time.Millisecond, LockTimeout: time.Second, CacheSize: 1 << 20},
			Resume:       framework.ResumeFromPointer,
		}},
	}
	require.Equal(t, want, cfg)

	// everyKey gives every key the loader takes: in each mapping, the keys
	// it names are those an unknown key's error lists as valid.
	given := schemaKeys(t, everyKey)
	for _, m := range []struct{ path, doc string }{
		{"", "bogus: 1\n"},
		{"operator", "operator: {bogus: 1}\n"},
		{"eventFeeds[]", "eventFeeds: [{bogus: 1}]\n"},
		{"eventFeeds[].instance", "eventFeeds: [{name: a, instance: {bogus: 1}}]\n"},
		{"eventFeeds[].overload", "eventFeeds: [{overload: {bogus: 1}}]\n"},
		{"eventFeeds[].idle", "eventFeeds: [{idle: {bogus: 1}}]\n"},
		{"processorGroups[]", "processorGroups: [{bogus: 1}]\n"},
		{"processorGroups[].failure", "processorGroups: [{failure: {bogus: 1}}]\n"},
		{"processorGroups[].storeOptions", "processorGroups: [{storeOptions: {bogus: 1}}]\n"},
	} {
		for _, k := range validKeys(t, m.doc, m.path) {
			require.Contains(t, given, strings.TrimPrefix(m.path+"."+k, "."), "everyKey misses a key")
		}
	}

	// And the documented example names every key too (in a comment for
	// those it leaves out).
	example, err := os.ReadFile(exampleFile)
	require.NoError(t, err)
	for _, k := range given {
		leaf := k[strings.LastIndex(k, ".")+1:]
		require.Regexp(t, `(?m)^[ #-]*`+regexp.QuoteMeta(leaf)+`:|[{,] *`+regexp.QuoteMeta(leaf)+`:`, string(example), "%s does not document %s", exampleFile, k)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	for name, tc := range map[string]struct{ doc, want string }{
		"unknown group key, the issue's example": {
			"eventFeeds: []\nprocessorGroups:\n  - agentName: g\n    processors: [p]\n\n\n    agentNme: x\n",
			`line 7: processorGroups[0]: unknown key "agentNme"; did you mean "agentName"? (valid: agentName, processors, failure, store, storeOptions, resume)`},
		"unknown top key": {"eventFeeds: []\nprocessorGrups: []\n",
			`line 2: unknown key "processorGrups"; did you mean "processorGroups"? (valid: logLevel, drainTimeout, untilSettled, operator, eventFeeds, processorGroups)`},
		"unknown feed key": {"eventFeeds:\n  - name: a\n    filenam: x\n",
			`line 3: eventFeeds[0]: unknown key "filenam"; did you mean "filename"?`},
		"key in another case": {"eventFeeds:\n  - name: a\n    FileName: x\n",
			`line 3: eventFeeds[0]: unknown key "FileName"; did you mean "filename"?`},
		"unknown key, nothing close": {"eventFeeds:\n  - name: a\n    instance:\n      source: x\n",
			`line 4: eventFeeds[0].instance: unknown key "source" (valid: filename, readStrategy, maxLineBytes, pointerDir, rotated, rotateWait, paths, exclude, forgetAfter, sync, syncInterval, syncCommit)`},
		"bad policy": {"eventFeeds:\n  - name: a\n    filename: x\n    overload: {policy: DROP}\n",
			`line 4: eventFeeds[0].overload.policy: unknown value "DROP" (valid: PAUSE, DROP_AFTER_SPIN)`},
		"misspelt policy": {"eventFeeds:\n  - name: a\n    filename: x\n    overload: {policy: pause_}\n",
			`line 4: eventFeeds[0].overload.policy: unknown value "pause_"; did you mean "PAUSE"? (valid: PAUSE, DROP_AFTER_SPIN)`},
		"bad strategy": {"eventFeeds:\n  - name: a\n    filename: x\n    readStrategy: NEWEST\n",
			`line 4: eventFeeds[0].readStrategy: unknown value "NEWEST" (valid: COMMITTED, EARLIEST, ONCE_EARLIEST, LATEST, ONCE_LATEST)`},
		"misspelt strategy": {"eventFeeds:\n  - name: a\n    filename: x\n    readStrategy: lastest\n",
			`line 4: eventFeeds[0].readStrategy: unknown value "lastest"; did you mean "LATEST"?`},
		"bad sync": {"eventFeeds:\n  - name: a\n    filename: x\n    sync: always\n",
			`line 4: eventFeeds[0].sync: unknown value "always" (valid: EVERY_COMMIT, INTERVAL, NEVER)`},
		"bad action": {"processorGroups:\n  - agentName: g\n    failure: {action: RETRY}\n",
			`line 3: processorGroups[0].failure.action: unknown value "RETRY" (valid: SKIP, QUARANTINE)`},
		"bad resume": {"processorGroups:\n  - {agentName: g, processors: [p], resume: sometimes}\n",
			`line 2: processorGroups[0].resume: unknown value "sometimes" (valid: STORE, POINTER)`},
		"bad level": {"logLevel: loud\n", `line 1: logLevel: unknown value "loud" (valid: DEBUG, INFO, WARN, ERROR)`},
		"bad duration": {"drainTimeout: soon\n",
			`line 1: drainTimeout: "soon" is not a duration: want one such as 500ms, 10s or 1m30s`},
		"duration without unit": {"drainTimeout: 10\n", `line 1: drainTimeout: "10" is not a duration`},
		"bad number":            {"eventFeeds:\n  - name: a\n    batchSize: lots\n", `line 3: eventFeeds[0].batchSize: "lots": want a whole number`},
		"bad bool":              {"untilSettled: maybe\n", `line 1: untilSettled: "maybe": want true or false`},
		"negative retries": {"processorGroups:\n  - {agentName: g, processors: [p], failure: {retries: -2}}\n",
			`line 2: processorGroups[0].failure.retries: -2: want 0 (no retries) or more`},
		"batch size too large": {"eventFeeds:\n  - name: a\n    filename: x\n    batchSize: 100000\n",
			`line 4: eventFeeds[0].batchSize: 100000: want 0 (the default) to 65536`},
		"a list for a mapping": {"eventFeeds:\n  - name: a\n    overload: [PAUSE]\n",
			`line 3: eventFeeds[0].overload: want a mapping of keys (policy, spin), found a list`},
		"a mapping for a list": {"eventFeeds:\n  name: a\n",
			`line 2: eventFeeds: want a list (as [a, b], or one entry per line starting with "- "), found a mapping of keys`},
		"a list for a string": {"eventFeeds:\n  - name: [a]\n", `line 2: eventFeeds[0].name: want a string, found a list`},
		"key given twice": {"eventFeeds:\n  - name: a\n    filename: x\n    filename: y\n",
			`line 4: eventFeeds[0]: key "filename" given twice (first at line 3)`},
		"both file places": {"eventFeeds:\n  - name: a\n    filename: x\n    instance: {filename: y}\n",
			`line 3: eventFeeds[0].filename: the feed has an instance: give the file settings (filename) in the instance or in the feed, not both`},
		"strategy no file": {"eventFeeds:\n  - name: a\n    readStrategy: EARLIEST\n",
			`line 3: eventFeeds[0].readStrategy: a file setting without a filename: set filename (the input file)`},
		"feed without a name": {"eventFeeds:\n  - filename: a.log\n",
			`line 2: eventFeeds[0]: name is missing: every feed needs one`},
		"two feeds of one name": {"eventFeeds:\n  - {name: a, filename: a.log}\n  - {name: a, filename: b.log}\n",
			`line 3: eventFeeds[1].name: feed "a" is defined twice (first at line 2)`},
		"group without a name": {"processorGroups:\n  - processors: [p]\n",
			`line 2: processorGroups[0]: agentName is missing`},
		"store options without a store": {"processorGroups:\n  - agentName: g\n    storeOptions: {sync: true}\n",
			`line 3: processorGroups[0].storeOptions: store options without a store`},
		"empty":         {"", `config: the config is empty`},
		"only comments": {"# nothing\n", `config: the config is empty`},
		"two documents": {"drainTimeout: 1s\n---\ndrainTimeout: 2s\n",
			`line 2: a second YAML document starts here: the config is one document`},
		"not a mapping": {"- a\n", `line 1: want a mapping of keys (logLevel, drainTimeout, untilSettled, operator, eventFeeds, processorGroups), found a list`},
		"not YAML":      {"eventFeeds: [\n", `line 1: not valid YAML: did not find expected node content`},
		"tab indent":    {"eventFeeds:\n\t- name: a\n", `line 2: not valid YAML: found character that cannot start any token`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := framework.LoadConfig(strings.NewReader(tc.doc))
			require.ErrorIs(t, err, framework.ErrInvalidConfig)
			var ce *framework.ConfigError
			require.ErrorAs(t, err, &ce)
			require.True(t, strings.HasPrefix(err.Error(), tc.want), "error\n\t%s\nwant it to start with\n\t%s", err, tc.want)
			for _, bad := range []string{"framework.", "yaml:", "framework: invalid config", "load config"} {
				require.NotContains(t, err.Error(), bad, "no Go type names or repeated prefixes")
			}
		})
	}
}

// Every mistake of a document is reported, each with its line.
func TestLoadConfigSeveralErrors(t *testing.T) {
	_, err := framework.LoadConfig(strings.NewReader("drainTimeout: soon\neventFeeds:\n  - name: a\n    filenam: x\n    batchSize: lots\n"))
	require.ErrorIs(t, err, framework.ErrInvalidConfig)
	require.Equal(t, `line 1: drainTimeout: "soon" is not a duration: want one such as 500ms, 10s or 1m30s
line 4: eventFeeds[0]: unknown key "filenam"; did you mean "filename"? (valid: name, instance, filename, readStrategy, maxLineBytes, pointerDir, rotated, rotateWait, paths, exclude, forgetAfter, sync, syncInterval, syncCommit, agentName, overload, idle, queueCapacity, batchSize, statusEvents)
line 5: eventFeeds[0].batchSize: "lots": want a whole number`, err.Error())
}

// A file's errors start with its path and the line.
func TestLoadConfigFileErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "orders.yaml")
	require.NoError(t, os.WriteFile(path, []byte("eventFeeds: []\nprocessorGroups:\n  - agentName: g\n    processors: [p]\n\n\n    agentNme: x\n"), 0o644))
	_, err := framework.LoadConfigFile(path)
	require.ErrorIs(t, err, framework.ErrInvalidConfig)
	require.EqualError(t, err, path+`:7: processorGroups[0]: unknown key "agentNme"; did you mean "agentName"? (valid: agentName, processors, failure, store, storeOptions, resume)`)
	var ce *framework.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, framework.ConfigError{File: path, Line: 7, Key: "processorGroups[0]", Msg: ce.Msg}, *ce)

	require.NoError(t, os.WriteFile(path, nil, 0o644))
	_, err = framework.LoadConfigFile(path)
	require.EqualError(t, err, path+": the config is empty: give at least eventFeeds and processorGroups")

	_, err = framework.LoadConfigFile(filepath.Join(dir, "missing.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NotErrorIs(t, err, framework.ErrInvalidConfig)
}

func TestLoadConfigEnv(t *testing.T) {
	t.Setenv("TM_DIR", "/srv/in")
	t.Setenv("TM_BATCH", "32")
	t.Setenv("TM_EMPTY", "")
	cfg, err := framework.LoadConfig(strings.NewReader(`eventFeeds:
  - name: a
    filename: ${TM_DIR}/a.log
    pointerDir: ${TM_UNSET_PTR:-/var/lib/tm}
    rotated: ${TM_EMPTY:-a.log.*}
    agentName: cost-$$5-$x-${TM_EMPTY}
    batchSize: ${TM_BATCH}
    queueCapacity: ${TM_UNSET_CAP:-}
processorGroups:
  - agentName: g
    processors: ["${TM_UNSET_P:-p}"]
`))
	require.NoError(t, err)
	f := cfg.Feeds[0]
	require.Equal(t, "/srv/in/a.log", f.File.Filename)
	require.Equal(t, "/var/lib/tm", f.File.PointerDir)
	require.Equal(t, "a.log.*", f.File.Rotated, "an empty variable takes the default")
	require.Equal(t, "cost-$5-$x-", f.AgentName)
	require.Equal(t, 32, f.BatchSize)
	require.Zero(t, f.QueueCapacity, "an empty value is the default")
	require.Equal(t, []string{"p"}, cfg.Groups[0].Processors)

	for _, tc := range []struct{ doc, want string }{
		{"eventFeeds:\n  - name: a\n    filename: ${TM_UNSET_INPUT}/a.log\n",
			`line 3: eventFeeds[0].filename: variable TM_UNSET_INPUT is not set: set it in the environment, or give a default: ${TM_UNSET_INPUT:-value}`},
		{"drainTimeout: ${TM_DIR}\n", `line 1: drainTimeout: "/srv/in" is not a duration`},
		{"eventFeeds:\n  - name: ${TM_DIR\n", `line 2: eventFeeds[0].name: "${TM_DIR" has a ${ without its }`},
		{"eventFeeds:\n  - name: ${1X}\n", `line 2: eventFeeds[0].name: ${1X}: "1X" is not a variable name`},
		{"eventFeeds:\n  - name: ${TM_DIR-x}\n", `line 2: eventFeeds[0].name: ${TM_DIR-x}: "TM_DIR-x" is not a variable name`},
	} {
		_, err := framework.LoadConfig(strings.NewReader(tc.doc))
		require.ErrorIs(t, err, framework.ErrInvalidConfig)
		require.True(t, strings.HasPrefix(err.Error(), tc.want), "error\n\t%s\nwant\n\t%s", err, tc.want)
	}
	// Keys are not expanded.
	_, err = framework.LoadConfig(strings.NewReader("${TM_DIR}: 1\n"))
	require.ErrorContains(t, err, `unknown key "${TM_DIR}"`)
}

// Anchors, aliases and merge keys are followed; keys given beside a merge
// win over the merged ones.
func TestLoadConfigAnchors(t *testing.T) {
	cfg, err := framework.LoadConfig(strings.NewReader(`eventFeeds:
  - &base {name: a, filename: a.log, batchSize: 8, overload: {policy: PAUSE}}
  - <<: *base
    name: b
    filename: b.log
processorGroups:
  - agentName: g
    processors: &procs [p]
    failure: &fail {retries: 0}
  - agentName: h
    processors: [q]
    failure: *fail
`))
	require.NoError(t, err)
	require.Equal(t, "b", cfg.Feeds[1].Name)
	require.Equal(t, "b.log", cfg.Feeds[1].File.Filename)
	require.Equal(t, 8, cfg.Feeds[1].BatchSize)
	require.Equal(t, framework.Pause, cfg.Feeds[1].Overload.Policy)
	require.Equal(t, framework.NoRetries, cfg.Groups[1].Failure.Retries)

	// A billion laughs ends in an error, not in a long wait.
	doc := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	for i := 'b'; i <= 'j'; i++ {
		prev := string(i - 1)
		doc += string(i) + ": &" + string(i) + " [*" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n"
	}
	doc += "eventFeeds:\n  - name: a\n    instance:\n      filename: x\n    agentName: *j\n"
	_, err = framework.LoadConfig(strings.NewReader(doc))
	require.ErrorIs(t, err, framework.ErrInvalidConfig)
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
	s := startServer(t, cfg, framework.Processors{"ledger": p})
	settle(t, s, "orders")
	stopServer(t, s)
	got := p.all()
	require.Len(t, got, 3)
	require.Equal(t, "c", got[2].line)
	require.EqualValues(t, 6, got[2].d.Position)
}

func FuzzLoadConfig(f *testing.F) {
	f.Add([]byte(specExample))
	f.Add([]byte(everyKey))
	if b, err := os.ReadFile(exampleFile); err == nil {
		f.Add(b)
	}
	f.Add([]byte("eventFeeds: []\n"))
	f.Add([]byte("eventFeeds:\n  - &b {name: a, filename: ${TM_X:-a.log}}\n  - {<<: *b, name: b}\n"))
	f.Add([]byte("operator: {addr: '$$x', token: ${T:-}}\nlogLevel: warn\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		cfg, err := framework.LoadConfig(strings.NewReader(string(doc)))
		if err != nil {
			if !errors.Is(err, framework.ErrInvalidConfig) {
				t.Fatalf("an error that does not wrap ErrInvalidConfig: %v", err)
			}
			return
		}
		// A config that loads makes a server or fails with ErrInvalidConfig;
		// it never panics. Files are not opened by New; stores are, and
		// are left out (opening one costs syncs, and is not the parser's).
		for i := range cfg.Feeds {
			if cfg.Feeds[i].File != nil {
				cfg.Feeds[i].File.Filename = filepath.Join(t.TempDir(), "in")
				cfg.Feeds[i].File.PointerDir = ""
			}
		}
		for i := range cfg.Groups {
			cfg.Groups[i].Store, cfg.Groups[i].StoreOptions = "", nil
		}
		cfg.Logger = discard()
		if s, err := framework.New(cfg, framework.Processors{}); err == nil {
			_ = s.Stop(context.Background())
		}
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
	require.Nil(t, cfg.Groups[1].StoreOptions, "absent: the defaults")
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
	require.ErrorContains(t, err, "a file setting without a filename")
}

// logLevel makes the server's default logger (Config.Logger nil) drop the
// records below it, and that of its file sources and stores.
func TestLogLevelFiltersTheDefaultLogger(t *testing.T) {
	var buf logBuf
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(old)

	dir := t.TempDir()
	input := filepath.Join(dir, "orders.csv")
	require.NoError(t, os.WriteFile(input, []byte("a\n"), 0o644))
	for _, tc := range []struct {
		level     string
		info, any bool // INFO records expected; any record expected
	}{
		{"INFO", true, true},
		{"WARN", false, true}, // the missing overload policy's warning
		{"ERROR", false, false},
	} {
		buf.reset()
		cfg, err := framework.LoadConfig(strings.NewReader("logLevel: " + tc.level + "\neventFeeds:\n  - {name: orders, filename: " + input + "}\nprocessorGroups:\n  - {agentName: g, processors: [p], store: 'bbolt:" + filepath.Join(dir, "st-"+tc.level) + "'}\n"))
		require.NoError(t, err)
		s := startServer(t, cfg, framework.Processors{"p": &recProc{feeds: []string{"orders"}}})
		settle(t, s, "orders")
		stopServer(t, s)
		out := buf.String()
		require.Equal(t, tc.info, strings.Contains(out, "level=INFO"), "%s:\n%s", tc.level, out)
		require.Equal(t, tc.info, strings.Contains(out, "no pointer file"), "the file source's notes follow the level:\n%s", out)
		require.Equal(t, tc.any, out != "", "%s:\n%s", tc.level, out)
		require.NotContains(t, out, "level=DEBUG")
	}
}

// An operator section is served by Config.StartOperator, started at Start
// and closed once the server has stopped; without one New refuses it.
func TestOperatorIsStartedAndClosed(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "orders.csv")
	require.NoError(t, os.WriteFile(input, []byte("a\n"), 0o644))
	cfg, err := framework.LoadConfig(strings.NewReader("operator: {addr: '127.0.0.1:0', token: t0k, watch: 1s}\neventFeeds:\n  - {name: orders, filename: " + input + ", overload: {policy: PAUSE}}\nprocessorGroups:\n  - {agentName: g, processors: [p]}\n"))
	require.NoError(t, err)
	cfg.Logger = discard()
	_, err = framework.New(cfg, framework.Processors{"p": &recProc{feeds: []string{"orders"}}})
	require.ErrorIs(t, err, framework.ErrInvalidConfig)
	require.ErrorContains(t, err, "nothing starts it")

	var got framework.OperatorConfig
	closed := make(chan struct{})
	cfg.StartOperator = func(ctx context.Context, srv *framework.Server, c framework.OperatorConfig) (io.Closer, error) {
		got = c
		if _, err := srv.FeedStatus("orders"); err != nil {
			return nil, err
		}
		return closerFunc(func() error {
			select {
			case <-srv.Done():
				t.Error("closed after the server's Done")
			default:
			}
			close(closed)
			return nil
		}), nil
	}
	s := startServer(t, cfg, framework.Processors{"p": &recProc{feeds: []string{"orders"}}})
	require.Equal(t, framework.OperatorConfig{Addr: "127.0.0.1:0", Token: "t0k", Watch: time.Second}, got)
	settle(t, s, "orders")
	select {
	case <-closed:
		t.Fatal("closed while running")
	default:
	}
	stopServer(t, s)
	<-closed

	// A listener that does not start fails Start, and what started is
	// stopped.
	cfg.StartOperator = func(context.Context, *framework.Server, framework.OperatorConfig) (io.Closer, error) {
		return nil, errors.New("address in use")
	}
	s, err = framework.New(cfg, framework.Processors{"p": &recProc{feeds: []string{"orders"}}})
	require.NoError(t, err)
	err = s.Start(context.Background())
	require.ErrorContains(t, err, "start the operator listener: address in use")
	<-s.Done()
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }
func TestLoadConfigPaths(t *testing.T) {
	cfg, err := framework.LoadConfig(strings.NewReader("eventFeeds:\n  - name: logs\n    paths: ['logs/*.log', 'more/*.log']\n    exclude: ['debug-*']\n    rotated: '{name}.*'\n    forgetAfter: 30m\n    pointerDir: ptr\n"))
	require.NoError(t, err)
	f := cfg.Feeds[0].File
	require.Equal(t, []string{"logs/*.log", "more/*.log"}, f.Paths)
	require.Equal(t, []string{"debug-*"}, f.Exclude)
	require.Equal(t, 30*time.Minute, f.ForgetAfter)
	require.Empty(t, f.Filename)
	_, err = framework.LoadConfig(strings.NewReader("eventFeeds:\n  - {name: x, filename: a.log, paths: ['*.log']}\n"))
	require.ErrorIs(t, err, framework.ErrInvalidConfig)
	require.ErrorContains(t, err, "not both")
}
