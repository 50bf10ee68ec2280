package framework

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/state"
)

// The YAML form of a Config; see LoadConfig and testdata/example.yaml. The
// decoder (yamldecode.go) reads the yaml tags: the tag's name is the key; a
// field tagged ",inline" lends its keys to the mapping it is in; a field
// tagged ",line" gets the mapping's line, one tagged ",keys" the line of
// each key given.

type yamlConfig struct {
	LogLevel        *yamlLevel    `yaml:"logLevel"`
	DrainTimeout    time.Duration `yaml:"drainTimeout"`
	UntilSettled    bool          `yaml:"untilSettled"`
	Operator        *yamlOperator `yaml:"operator"`
	EventFeeds      []yamlFeed    `yaml:"eventFeeds"`
	ProcessorGroups []yamlGroup   `yaml:"processorGroups"`
}

type yamlOperator struct {
	Addr              string        `yaml:"addr"`
	Token             string        `yaml:"token"`
	AllowedHosts      []string      `yaml:"allowedHosts"`
	MaxConns          int           `yaml:"maxConns"`
	ReadHeaderTimeout time.Duration `yaml:"readHeaderTimeout"`
	ReadTimeout       time.Duration `yaml:"readTimeout"`
	WriteTimeout      time.Duration `yaml:"writeTimeout"`
	IdleTimeout       time.Duration `yaml:"idleTimeout"`
	Watch             time.Duration `yaml:"watch"`
	Refresh           time.Duration `yaml:"refresh"`
	Line              int           `yaml:",line"`
}

type yamlFeed struct {
	Name          string         `yaml:"name"`
	Instance      *yamlFile      `yaml:"instance"`
	File          yamlFile       `yaml:",inline"`
	AgentName     string         `yaml:"agentName"`
	Overload      yamlOverload   `yaml:"overload"`
	Idle          *yamlIdle      `yaml:"idle"`
	QueueCapacity int            `yaml:"queueCapacity"`
	BatchSize     int            `yaml:"batchSize"`
	StatusEvents  bool           `yaml:"statusEvents"`
	Line          int            `yaml:",line"`
	Keys          map[string]int `yaml:",keys"`
}

// yamlFile is a file feed's settings: in the feed's mapping, or in its
// instance (the spec's FileEventSource), not both.
type yamlFile struct {
	Filename     string         `yaml:"filename"`
	ReadStrategy *yamlStrategy  `yaml:"readStrategy"`
	MaxLineBytes int            `yaml:"maxLineBytes"`
	PointerDir   string         `yaml:"pointerDir"`
	Rotated      string         `yaml:"rotated"`
	RotateWait   time.Duration  `yaml:"rotateWait"`
	Paths        []string       `yaml:"paths"`
	Exclude      []string       `yaml:"exclude"`
	ForgetAfter  time.Duration  `yaml:"forgetAfter"`
	Sync         *yamlSync      `yaml:"sync"`
	SyncInterval time.Duration  `yaml:"syncInterval"`
	SyncCommit   bool           `yaml:"syncCommit"`
	Keys         map[string]int `yaml:",keys"`
}

type yamlOverload struct {
	Policy yamlPolicy    `yaml:"policy"`
	Spin   time.Duration `yaml:"spin"`
}

type yamlIdle struct {
	Min time.Duration `yaml:"min"`
	Max time.Duration `yaml:"max"`
}

type yamlGroup struct {
	AgentName    string            `yaml:"agentName"`
	Processors   []string          `yaml:"processors"`
	Failure      yamlFailure       `yaml:"failure"`
	Store        string            `yaml:"store"`
	StoreOptions *yamlStoreOptions `yaml:"storeOptions"`
	Resume       yamlResume        `yaml:"resume"`
	Line         int               `yaml:",line"`
	Keys         map[string]int    `yaml:",keys"`
}

type yamlFailure struct {
	Retries    *int           `yaml:"retries"`
	Backoff    time.Duration  `yaml:"backoff"`
	MaxBackoff time.Duration  `yaml:"maxBackoff"`
	Action     yamlAction     `yaml:"action"`
	Keys       map[string]int `yaml:",keys"`
}

type yamlStoreOptions struct {
	Sync          bool           `yaml:"sync"`
	BatchSize     int            `yaml:"batchSize"`
	BatchInterval time.Duration  `yaml:"batchInterval"`
	LockTimeout   time.Duration  `yaml:"lockTimeout"`
	CacheSize     int            `yaml:"cacheSize"`
	Line          int            `yaml:",line"`
	Keys          map[string]int `yaml:",keys"`
}

// The names, each parsed from one scalar (see yamlScalar).

type yamlStrategy struct{ v feed.ReadStrategy }

func (s *yamlStrategy) parseYAML(v string) error {
	return parseName(v, []string{"COMMITTED", "EARLIEST", "ONCE_EARLIEST", "LATEST", "ONCE_LATEST"}, s.v.UnmarshalText)
}

type yamlPolicy struct{ v OverloadPolicy }

func (p *yamlPolicy) parseYAML(v string) error {
	return parseName(v, []string{"PAUSE", "DROP_AFTER_SPIN"}, p.v.UnmarshalText)
}

type yamlResume struct{ v ResumeMode }

func (m *yamlResume) parseYAML(v string) error {
	return parseName(v, []string{"STORE", "POINTER"}, m.v.UnmarshalText)
}

type yamlAction struct{ v FailureAction }

func (a *yamlAction) parseYAML(v string) error {
	return parseName(v, []string{"SKIP", "QUARANTINE"}, a.v.UnmarshalText)
}

type yamlSync struct{ v feed.SyncPolicy }

func (s *yamlSync) parseYAML(v string) error {
	return parseName(v, []string{"EVERY_COMMIT", "INTERVAL", "NEVER"}, func(b []byte) error {
		switch strings.ToUpper(string(b)) {
		case "EVERY_COMMIT":
			s.v = feed.SyncEveryCommit
		case "INTERVAL":
			s.v = feed.SyncInterval
		case "NEVER":
			s.v = feed.SyncNever
		default:
			return errors.New("unknown")
		}
		return nil
	})
}

type yamlLevel struct{ v slog.Level }

func (l *yamlLevel) parseYAML(v string) error {
	return parseName(v, []string{"DEBUG", "INFO", "WARN", "ERROR"}, l.v.UnmarshalText)
}

// parseName parses v with parse, and when parse refuses it, says which
// names are valid and which of them v is closest to.
func parseName(v string, names []string, parse func([]byte) error) error {
	if parse([]byte(strings.TrimSpace(v))) == nil {
		return nil
	}
	if s := suggest(strings.ToUpper(v), names); s != "" {
		return fmt.Errorf("unknown value %q; did you mean %q? (valid: %s)", v, s, strings.Join(names, ", "))
	}
	return fmt.Errorf("unknown value %q (valid: %s)", v, strings.Join(names, ", "))
}

// LoadConfig reads a Config from YAML. The complete schema, every key
// with its default and what it means, is testdata/example.yaml in this
// package's folder; in short:
//
//	logLevel: INFO                # DEBUG, INFO, WARN, ERROR (see Config.LogLevel)
//	drainTimeout: 10s
//	untilSettled: false           # true: Server.Run returns once every feed settled
//	operator:                     # the operator listener (see OperatorConfig, ops.Use)
//	  addr: 127.0.0.1:9464
//	  token: ${TIDEMARK_TOKEN}
//	eventFeeds:
//	  - name: orders
//	    instance:                 # or the same keys directly in the feed
//	      filename: data/orders.csv
//	      readStrategy: COMMITTED # or COMMITED, EARLIEST, ONCE_EARLIEST, LATEST, ONCE_LATEST
//	      pointerDir: /var/lib/orders-reader
//	      rotated: orders.csv.*
//	      sync: EVERY_COMMIT      # or INTERVAL, NEVER
//	      # or, for a set of files, instead of filename (pointerDir required):
//	      # paths: [logs/*.log], exclude: [debug-*], rotated: "{name}.*", forgetAfter: 1h
//	    agentName: orders-feed-agent
//	    overload: {policy: PAUSE} # or DROP_AFTER_SPIN
//	processorGroups:
//	  - agentName: orders-agent
//	    processors: [ledger]
//	    failure: {retries: 3, backoff: 10ms, maxBackoff: 1s, action: SKIP}  # or QUARANTINE
//	    store: bbolt:data/orders  # or pebble:DIR; the group's store (see GroupConfig.Store)
//	    storeOptions: {sync: false, batchSize: 1024, batchInterval: 5ms, lockTimeout: 5s, cacheSize: 268435456}
//	    resume: STORE             # or POINTER (see ResumeMode)
//
// Values may name environment variables: ${VAR} is VAR's value, and an
// error when VAR is not set; ${VAR:-default} is default when VAR is not
// set or empty; $$ is one $. Any other $ is itself. Variables are expanded
// in values only, never in keys, and an expanded value is never parsed as
// YAML again. An empty value is the key's default.
//
// failure.retries left out means DefaultRetries; "retries: 0" means none.
// Names (readStrategy, policy, action, resume, sync, logLevel) are read
// without regard to case. Anchors, aliases and merge keys (<<: *base) are
// followed.
//
// An error names the line, the key and what is wrong, and wraps
// ErrInvalidConfig; each is a [*ConfigError], and several are joined:
//
//	line 7: processorGroups[0]: unknown key "agentNme"; did you mean "agentName"? (valid: agentName, processors, failure, store, storeOptions, resume)
//
// The Logger, Checkpoints, Observer, sources, processors and the reject
// callbacks are not part of the YAML: set them on the result, and bind
// processors by name with [New].
func LoadConfig(r io.Reader) (Config, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return Config{}, fmt.Errorf("framework: read config: %w", err)
	}
	return loadConfig("", b)
}

// LoadConfigFile reads a Config from the YAML file at path; see
// LoadConfig. Its errors start with the path and the line:
//
//	orders.yaml:7: processorGroups[0]: unknown key "agentNme"; did you mean "agentName"? (valid: …)
func LoadConfigFile(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("framework: read config: %w", err)
	}
	return loadConfig(path, b)
}

// loadConfig parses, expands and checks the YAML document b of the file
// named file ("" for a reader).
func loadConfig(file string, b []byte) (Config, error) {
	var y yamlConfig
	d := &yamlDecoder{lookup: os.LookupEnv}
	if root := d.parse(b); root != nil {
		d.decode(root, &y, "")
	}
	var cfg Config
	if len(d.errs) == 0 {
		cfg = d.config(&y)
	}
	if len(d.errs) == 0 {
		return cfg, nil
	}
	errs := make([]error, len(d.errs))
	for i, e := range d.errs {
		e.File = file
		errs[i] = e
	}
	if len(errs) == 1 {
		return Config{}, errs[0]
	}
	return Config{}, errors.Join(errs...)
}

// parse reads the one YAML document of b; nil (and an error recorded)
// when there is none, or more than one.
func (d *yamlDecoder) parse(b []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.errorf(0, "", "the config is empty: give at least eventFeeds and processorGroups")
		} else {
			d.syntaxError(err)
		}
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			d.syntaxError(err)
		} else {
			d.errorf(extra.Line, "", "a second YAML document starts here: the config is one document")
		}
		return nil
	}
	if len(doc.Content) == 0 {
		d.errorf(0, "", "the config is empty: give at least eventFeeds and processorGroups")
		return nil
	}
	return doc.Content[0]
}

// config turns the decoded YAML into a Config, checking what the keys
// alone do not say (names given, file settings in one place).
func (d *yamlDecoder) config(y *yamlConfig) Config {
	cfg := Config{DrainTimeout: y.DrainTimeout, UntilSettled: y.UntilSettled}
	if y.LogLevel != nil {
		cfg.LogLevel = y.LogLevel.v
	}
	if o := y.Operator; o != nil {
		cfg.Operator = &OperatorConfig{
			Addr: o.Addr, Token: o.Token, AllowedHosts: o.AllowedHosts, MaxConns: o.MaxConns,
			ReadHeaderTimeout: o.ReadHeaderTimeout, ReadTimeout: o.ReadTimeout,
			WriteTimeout: o.WriteTimeout, IdleTimeout: o.IdleTimeout,
			Watch: o.Watch, Refresh: o.Refresh,
		}
		d.nonNegative(o.Line, "operator.maxConns", o.MaxConns)
	}
	feeds := map[string]int{}
	for i, yf := range y.EventFeeds {
		at := fmt.Sprintf("eventFeeds[%d]", i)
		if yf.Name == "" {
			d.errorf(yf.Line, at, "name is missing: every feed needs one (processors subscribe to it by name)")
		} else if line, dup := feeds[yf.Name]; dup {
			d.errorf(yf.Keys["name"], at+".name", "feed %q is defined twice (first at line %d)", yf.Name, line)
		} else {
			feeds[yf.Name] = yf.Keys["name"]
		}
		fc := FeedConfig{
			Name:          yf.Name,
			AgentName:     yf.AgentName,
			Overload:      OverloadConfig{Policy: yf.Overload.Policy.v, Spin: yf.Overload.Spin},
			QueueCapacity: yf.QueueCapacity,
			BatchSize:     yf.BatchSize,
			StatusEvents:  yf.StatusEvents,
		}
		d.within(yf.Keys["queueCapacity"], at+".queueCapacity", yf.QueueCapacity, MaxQueueCapacity)
		d.within(yf.Keys["batchSize"], at+".batchSize", yf.BatchSize, MaxBatchSize)
		file, fileAt := &yf.File, at
		if yf.Instance != nil {
			if k, line := firstKey(yf.File.Keys); k != "" {
				d.errorf(line, at+"."+k, "the feed has an instance: give the file settings (%s) in the instance or in the feed, not both", k)
			}
			file, fileAt = yf.Instance, at+".instance"
		}
		if file.Filename != "" && file.Paths != nil {
			d.errorf(file.Keys["paths"], fileAt+".paths", "give filename (one file) or paths (a set of files), not both")
		}
		if file.Filename != "" || file.Paths != nil {
			fc.File = &FileConfig{
				Filename:     file.Filename,
				Paths:        file.Paths,
				Exclude:      file.Exclude,
				ForgetAfter:  file.ForgetAfter,
				MaxLineBytes: file.MaxLineBytes,
				PointerDir:   file.PointerDir,
				Rotated:      file.Rotated,
				RotateWait:   file.RotateWait,
				SyncInterval: file.SyncInterval,
				SyncCommit:   file.SyncCommit,
			}
			if file.ReadStrategy != nil {
				fc.File.ReadStrategy = file.ReadStrategy.v
			}
			if file.Sync != nil {
				fc.File.Sync = file.Sync.v
			}
			d.nonNegative(file.Keys["maxLineBytes"], fileAt+".maxLineBytes", file.MaxLineBytes)
		} else if k, line := firstKey(file.Keys); k != "" {
			d.errorf(line, fileAt+"."+k, "a file setting without a filename: set filename (the input file) or paths (a set of files)")
		}
		if yf.Idle != nil {
			fc.Idle = Backoff{Min: yf.Idle.Min, Max: yf.Idle.Max}
		}
		cfg.Feeds = append(cfg.Feeds, fc)
	}
	groups := map[string]int{}
	for i, yg := range y.ProcessorGroups {
		at := fmt.Sprintf("processorGroups[%d]", i)
		if yg.AgentName == "" {
			d.errorf(yg.Line, at, "agentName is missing: every processor group needs one")
		} else if line, dup := groups[yg.AgentName]; dup {
			d.errorf(yg.Keys["agentName"], at+".agentName", "processor group %q is defined twice (first at line %d)", yg.AgentName, line)
		} else {
			groups[yg.AgentName] = yg.Keys["agentName"]
		}
		retries := 0 // DefaultRetries
		if r := yg.Failure.Retries; r != nil {
			switch {
			case *r < 0:
				d.errorf(yg.Failure.Keys["retries"], at+".failure.retries", "%d: want 0 (no retries) or more", *r)
			case *r == 0:
				retries = NoRetries
			default:
				retries = *r
			}
		}
		gc := GroupConfig{
			Name:       yg.AgentName,
			Processors: yg.Processors,
			Failure: FailurePolicy{
				Retries:    retries,
				Backoff:    yg.Failure.Backoff,
				MaxBackoff: yg.Failure.MaxBackoff,
				Action:     yg.Failure.Action.v,
			},
			Store:  yg.Store,
			Resume: yg.Resume.v,
		}
		if o := yg.StoreOptions; o != nil {
			if yg.Store == "" {
				d.errorf(o.Line, at+".storeOptions", "store options without a store: set store (\"bbolt:DIR\" or \"pebble:DIR\")")
			}
			d.nonNegative(o.Keys["batchSize"], at+".storeOptions.batchSize", o.BatchSize)
			gc.StoreOptions = &state.Options{Sync: o.Sync, BatchSize: o.BatchSize, BatchInterval: o.BatchInterval, LockTimeout: o.LockTimeout, CacheSize: int64(o.CacheSize)}
		}
		cfg.Groups = append(cfg.Groups, gc)
	}
	return cfg
}

// nonNegative records an error for a negative n.
func (d *yamlDecoder) nonNegative(line int, key string, n int) {
	if n < 0 {
		d.errorf(line, key, "%d: want 0 (the default) or more", n)
	}
}

// within records an error for an n outside 0..most.
func (d *yamlDecoder) within(line int, key string, n, most int) {
	if n < 0 || n > most {
		d.errorf(line, key, "%d: want 0 (the default) to %d", n, most)
	}
}

// firstKey returns the key of keys given first, and its line.
func firstKey(keys map[string]int) (string, int) {
	best, line := "", 0
	for k, l := range keys {
		if best == "" || l < line || (l == line && k < best) {
			best, line = k, l
		}
	}
	return best, line
}
