package framework

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tidemark-go/tidemark/feed"
)

// yamlConfig is the YAML form of a Config; see LoadConfig.
type yamlConfig struct {
	EventFeeds      []yamlFeed    `yaml:"eventFeeds"`
	ProcessorGroups []yamlGroup   `yaml:"processorGroups"`
	DrainTimeout    time.Duration `yaml:"drainTimeout"`
	UntilSettled    bool          `yaml:"untilSettled"`
}

type yamlFeed struct {
	Name          string        `yaml:"name"`
	Instance      *yamlInstance `yaml:"instance"`
	Filename      string        `yaml:"filename"`
	PointerDir    string        `yaml:"pointerDir"`
	Rotated       string        `yaml:"rotated"`
	RotateWait    time.Duration `yaml:"rotateWait"`
	ReadStrategy  *yamlStrategy `yaml:"readStrategy"`
	MaxLineBytes  int           `yaml:"maxLineBytes"`
	AgentName     string        `yaml:"agentName"`
	Overload      yamlOverload  `yaml:"overload"`
	Idle          *yamlIdle     `yaml:"idle"`
	QueueCapacity int           `yaml:"queueCapacity"`
	BatchSize     int           `yaml:"batchSize"`
	StatusEvents  bool          `yaml:"statusEvents"`
}

type yamlInstance struct {
	Filename     string        `yaml:"filename"`
	PointerDir   string        `yaml:"pointerDir"`
	Rotated      string        `yaml:"rotated"`
	RotateWait   time.Duration `yaml:"rotateWait"`
	ReadStrategy *yamlStrategy `yaml:"readStrategy"`
	MaxLineBytes int           `yaml:"maxLineBytes"`
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
	AgentName  string      `yaml:"agentName"`
	Processors []string    `yaml:"processors"`
	Failure    yamlFailure `yaml:"failure"`
	Store      string      `yaml:"store"`
	Resume     yamlResume  `yaml:"resume"`
}

type yamlFailure struct {
	Retries    *int          `yaml:"retries"`
	Backoff    time.Duration `yaml:"backoff"`
	MaxBackoff time.Duration `yaml:"maxBackoff"`
	Action     yamlAction    `yaml:"action"`
}

// The enums decode through yaml.Node so that a bad value's error names
// its line.

type yamlStrategy struct{ v feed.ReadStrategy }

func (s *yamlStrategy) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: readStrategy must be a name", n.Line)
	}
	if err := s.v.UnmarshalText([]byte(n.Value)); err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	return nil
}

type yamlPolicy struct{ v OverloadPolicy }

func (p *yamlPolicy) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: overload policy must be a name", n.Line)
	}
	if err := p.v.UnmarshalText([]byte(n.Value)); err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	return nil
}

type yamlResume struct{ v ResumeMode }

func (m *yamlResume) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: resume must be a name", n.Line)
	}
	if err := m.v.UnmarshalText([]byte(n.Value)); err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	return nil
}

type yamlAction struct{ v FailureAction }

func (a *yamlAction) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: failure action must be a name", n.Line)
	}
	if err := a.v.UnmarshalText([]byte(n.Value)); err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	return nil
}

// LoadConfig reads a Config from YAML. Keys follow the spec's example;
// every key is optional except the names:
//
//	drainTimeout: 10s
//	untilSettled: false           # true: Server.Run returns once every feed settled
//	eventFeeds:
//	  - name: orders
//	    instance:                 # or filename/readStrategy directly here
//	      filename: data/orders.csv
//	      readStrategy: COMMITTED # or COMMITED, EARLIEST, ONCE_EARLIEST, LATEST, ONCE_LATEST
//	      maxLineBytes: 1048576
//	      pointerDir: /var/lib/orders-reader  # default: beside the file
//	      rotated: orders.csv.*   # the names it is rotated to (.1 .2.gz, dates)
//	      rotateWait: 5s          # read a rotated file on until quiet this long
//	    agentName: orders-feed-agent
//	    overload:
//	      policy: PAUSE           # or DROP_AFTER_SPIN
//	      spin: 5ms
//	    idle: {min: 1ms, max: 50ms}
//	    queueCapacity: 4096
//	    batchSize: 1024
//	    statusEvents: false
//	processorGroups:
//	  - agentName: orders-agent
//	    processors: [ledger]
//	    failure: {retries: 3, backoff: 10ms, maxBackoff: 1s, action: SKIP}  # or QUARANTINE
//	    store: bbolt:data/orders  # or pebble:DIR; the group's store (see GroupConfig.Store)
//	    resume: STORE             # or POINTER (see ResumeMode)
//
// failure.retries left out means DefaultRetries; "retries: 0" means none.
// Unknown keys are errors that name the key and its line.
// The Logger, Checkpoints, sources and processors are not part of the YAML:
// set them on the result, and bind processors by name with [New].
func LoadConfig(r io.Reader) (Config, error) {
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	var y yamlConfig
	if err := dec.Decode(&y); err != nil {
		if errors.Is(err, io.EOF) {
			return Config{}, fmt.Errorf("framework: load config: %w: empty document", ErrInvalidConfig)
		}
		return Config{}, fmt.Errorf("framework: load config: %w: %w", ErrInvalidConfig, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("framework: load config: %w: more than one YAML document", ErrInvalidConfig)
	}
	cfg := Config{DrainTimeout: y.DrainTimeout, UntilSettled: y.UntilSettled}
	for i, yf := range y.EventFeeds {
		fc := FeedConfig{
			Name:          yf.Name,
			AgentName:     yf.AgentName,
			Overload:      OverloadConfig{Policy: yf.Overload.Policy.v, Spin: yf.Overload.Spin},
			QueueCapacity: yf.QueueCapacity,
			BatchSize:     yf.BatchSize,
			StatusEvents:  yf.StatusEvents,
		}
		file, strategy, maxLine, ptrDir := yf.Filename, yf.ReadStrategy, yf.MaxLineBytes, yf.PointerDir
		rotated, rotateWait := yf.Rotated, yf.RotateWait
		if yf.Instance != nil {
			if file != "" || strategy != nil || maxLine != 0 || ptrDir != "" || rotated != "" || rotateWait != 0 {
				return Config{}, fmt.Errorf("framework: load config: %w: feed %d (%q): give filename, readStrategy, maxLineBytes, pointerDir, rotated and rotateWait either in instance or in the feed, not both", ErrInvalidConfig, i+1, yf.Name)
			}
			file, strategy, maxLine, ptrDir = yf.Instance.Filename, yf.Instance.ReadStrategy, yf.Instance.MaxLineBytes, yf.Instance.PointerDir
			rotated, rotateWait = yf.Instance.Rotated, yf.Instance.RotateWait
		}
		if file != "" {
			fc.File = &FileConfig{Filename: file, MaxLineBytes: maxLine, PointerDir: ptrDir, Rotated: rotated, RotateWait: rotateWait}
			if strategy != nil {
				fc.File.ReadStrategy = strategy.v
			}
		} else if strategy != nil || maxLine != 0 || ptrDir != "" || rotated != "" || rotateWait != 0 {
			return Config{}, fmt.Errorf("framework: load config: %w: feed %d (%q) has file settings but no filename", ErrInvalidConfig, i+1, yf.Name)
		}
		if yf.Idle != nil {
			fc.Idle = Backoff{Min: yf.Idle.Min, Max: yf.Idle.Max}
		}
		cfg.Feeds = append(cfg.Feeds, fc)
	}
	for i, yg := range y.ProcessorGroups {
		retries := 0 // DefaultRetries
		if r := yg.Failure.Retries; r != nil {
			switch {
			case *r < 0:
				return Config{}, fmt.Errorf("framework: load config: %w: processor group %d (%q): retries %d: want 0 (no retries) or more", ErrInvalidConfig, i+1, yg.AgentName, *r)
			case *r == 0:
				retries = NoRetries
			default:
				retries = *r
			}
		}
		cfg.Groups = append(cfg.Groups, GroupConfig{
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
		})
	}
	return cfg, nil
}

// LoadConfigFile reads a Config from the YAML file at path.
func LoadConfigFile(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("framework: load config: %w", err)
	}
	cfg, err := LoadConfig(bytes.NewReader(b))
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}
