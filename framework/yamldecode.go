package framework

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ConfigError is a mistake in a YAML config: where it is and what is
// wrong. It wraps ErrInvalidConfig. Its message reads
//
//	orders.yaml:7: processorGroups[0]: unknown key "agentNme"; did you mean "agentName"? (valid: …)
//
// with "line 7:" in place of the file and line for a config read by
// [LoadConfig].
type ConfigError struct {
	// File is the config file's path; "" for a config read from a reader.
	File string
	// Line is the line (from 1) of the key or value at fault; 0 when the
	// mistake is the document's (an empty one).
	Line int
	// Key is the path of the key at fault, as eventFeeds[0].overload.policy;
	// "" for the document's top level.
	Key string
	// Msg says what is wrong.
	Msg string
}

// Error returns the file, line, key and message.
func (e *ConfigError) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		fmt.Fprintf(&b, "%s: ", e.File)
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	default:
		b.WriteString("config: ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// maxConfigErrors is how many mistakes one load reports at most.
const maxConfigErrors = 10

// configNodeBudget bounds the nodes a load visits, aliases followed: a
// document of a few aliases of aliases cannot make it work for ever.
const configNodeBudget = 1 << 20

// yamlDecoder decodes a YAML node tree into the yaml* structs, recording
// mistakes with their lines rather than stopping at the first.
type yamlDecoder struct {
	errs   []*ConfigError
	lookup func(string) (string, bool)
	visits int
}

func (d *yamlDecoder) errorf(line int, key, format string, args ...any) {
	if len(d.errs) < maxConfigErrors {
		d.errs = append(d.errs, &ConfigError{Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
	}
}

// yamlSyntax matches the parser's "yaml: line N: what" errors.
var yamlSyntax = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError records an error of the YAML parser, without its prefix.
func (d *yamlDecoder) syntaxError(err error) {
	msg := err.Error()
	if m := yamlSyntax.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		d.errorf(line, "", "not valid YAML: %s", m[2])
		return
	}
	d.errorf(0, "", "not valid YAML: %s", strings.TrimPrefix(msg, "yaml: "))
}

// yamlScalar is a field type that parses its own scalar (the names).
type yamlScalar interface {
	parseYAML(v string) error
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	scalarType   = reflect.TypeFor[yamlScalar]()
)

// decode decodes n into v (a pointer to a yaml* struct).
func (d *yamlDecoder) decode(n *yaml.Node, v any, key string) {
	d.value(n, reflect.ValueOf(v).Elem(), key)
}

// value decodes n into v, addressable; key is v's path, for errors.
func (d *yamlDecoder) value(n *yaml.Node, v reflect.Value, key string) {
	if n = d.follow(n); n == nil || isNull(n) {
		return // the default
	}
	t := v.Type()
	if reflect.PointerTo(t).Implements(scalarType) {
		if s, ok := d.scalar(n, key, "a name"); ok && s != "" {
			if err := v.Addr().Interface().(yamlScalar).parseYAML(s); err != nil {
				d.errorf(n.Line, key, "%v", err)
			}
		}
		return
	}
	switch {
	case t == durationType:
		s, ok := d.scalar(n, key, "a duration")
		if !ok || s == "" {
			return
		}
		dur, err := time.ParseDuration(s)
		if err != nil && s != "0" {
			d.errorf(n.Line, key, "%q is not a duration: want one such as 500ms, 10s or 1m30s", s)
			return
		}
		v.SetInt(int64(dur))
	case t.Kind() == reflect.String:
		if s, ok := d.scalar(n, key, "a string"); ok {
			v.SetString(s)
		}
	case t.Kind() == reflect.Bool:
		s, ok := d.scalar(n, key, "true or false")
		if !ok || s == "" {
			return
		}
		switch strings.ToLower(s) {
		case "true":
			v.SetBool(true)
		case "false":
			v.SetBool(false)
		default:
			d.errorf(n.Line, key, "%q: want true or false", s)
		}
	case t.Kind() == reflect.Int:
		s, ok := d.scalar(n, key, "a whole number")
		if !ok || s == "" {
			return
		}
		i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, strconv.IntSize)
		if err != nil {
			d.errorf(n.Line, key, "%q: want a whole number", s)
			return
		}
		v.SetInt(i)
	case t.Kind() == reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		d.value(n, v.Elem(), key)
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.errorf(n.Line, key, "want a list (as [a, b], or one entry per line starting with \"- \"), found %s", describe(n))
			return
		}
		for i, c := range n.Content {
			e := reflect.New(t.Elem()).Elem()
			d.value(c, e, fmt.Sprintf("%s[%d]", key, i))
			v.Set(reflect.Append(v, e))
		}
	case t.Kind() == reflect.Struct:
		d.mapping(n, v, key)
	default:
		panic(fmt.Sprintf("framework: no YAML decoding for %s", t)) // a yaml* struct's mistake
	}
}

// follow resolves an alias; nil once the visit budget is spent.
func (d *yamlDecoder) follow(n *yaml.Node) *yaml.Node {
	for hops := 0; n.Kind == yaml.AliasNode && n.Alias != nil && hops < 100; hops++ {
		n = n.Alias
	}
	if d.visits++; d.visits > configNodeBudget {
		if d.visits == configNodeBudget+1 {
			d.errorf(n.Line, "", "the document is too large once its aliases are followed")
		}
		return nil
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// describe says what n is, for an error.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping of keys"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "nothing"
}

// scalar returns n's value with its variables expanded; false (and an
// error recorded) when n is not a scalar or a variable is not set.
func (d *yamlDecoder) scalar(n *yaml.Node, key, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.errorf(n.Line, key, "want %s, found %s", want, describe(n))
		return "", false
	}
	s, err := expandVars(n.Value, d.lookup)
	if err != nil {
		d.errorf(n.Line, key, "%v", err)
		return "", false
	}
	return s, true
}

// yamlField is a key of a yaml* struct.
type yamlField struct {
	name  string
	index []int // in the struct, through inline fields
}

// yamlFields returns the keys of struct type t in order, those of inline
// fields at their place, and the indexes of its ",line" and ",keys"
// fields (nil when it has none).
func yamlFields(t reflect.Type) (keys []yamlField, line, keyLines []int) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, opt, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case opt == "line":
			line = []int{i}
		case opt == "keys":
			keyLines = []int{i}
		case opt == "inline":
			inner, _, _ := yamlFields(f.Type)
			for _, k := range inner {
				keys = append(keys, yamlField{name: k.name, index: append([]int{i}, k.index...)})
			}
		case name != "" && name != "-":
			keys = append(keys, yamlField{name: name, index: []int{i}})
		}
	}
	return keys, line, keyLines
}

// mapping decodes the mapping n into the struct v.
func (d *yamlDecoder) mapping(n *yaml.Node, v reflect.Value, key string) {
	fields, lineAt, _ := yamlFields(v.Type())
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, key, "want a mapping of keys (%s), found %s", names(fields), describe(n))
		return
	}
	if lineAt != nil {
		v.FieldByIndex(lineAt).SetInt(int64(n.Line))
	}
	seen := map[string]int{}
	for _, p := range d.pairs(n, key) {
		k, val := p[0], p[1]
		line, dup := seen[k.Value]
		switch {
		case dup && p[2] != nil:
			continue // merged in, and given before: the earlier one wins
		case dup:
			d.errorf(k.Line, key, "key %q given twice (first at line %d)", k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		f, ok := fieldNamed(fields, k.Value)
		if !ok {
			msg := fmt.Sprintf("unknown key %q", k.Value)
			if s := suggest(k.Value, namesOf(fields)); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			d.errorf(k.Line, key, "%s (valid: %s)", msg, names(fields))
			continue
		}
		d.value(val, v.FieldByIndex(f.index), joinKey(key, k.Value))
		recordKey(v, f.index, k.Value, k.Line)
	}
}

// recordKey records the line of key, a field at index of struct v, in the
// ",keys" map of the struct that holds the field (v, or an inline field).
func recordKey(v reflect.Value, index []int, key string, line int) {
	for len(index) > 1 {
		v, index = v.Field(index[0]), index[1:]
	}
	_, _, at := yamlFields(v.Type())
	if at == nil {
		return
	}
	m := v.FieldByIndex(at)
	if m.IsNil() {
		m.Set(reflect.MakeMap(m.Type()))
	}
	m.SetMapIndex(reflect.ValueOf(key), reflect.ValueOf(line))
}

// pairs returns the key/value pairs of the mapping n, then those merged in
// with "<<" (marked by a non-nil third node). Keys that are not scalars are
// recorded as errors and left out.
func (d *yamlDecoder) pairs(n *yaml.Node, key string) [][3]*yaml.Node {
	var own, merged [][3]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k.Line, key, "a key must be a name, found %s", describe(k))
			continue
		}
		if k.Value != "<<" || k.ShortTag() != "!!merge" {
			own = append(own, [3]*yaml.Node{k, val, nil})
			continue
		}
		if val = d.follow(val); val == nil {
			continue
		}
		srcs := []*yaml.Node{val}
		if val.Kind == yaml.SequenceNode {
			srcs = val.Content
		}
		for _, src := range srcs {
			if src = d.follow(src); src == nil {
				continue
			}
			if src.Kind != yaml.MappingNode {
				d.errorf(src.Line, key, "<< merges a mapping (an alias of one, as <<: *defaults), found %s", describe(src))
				continue
			}
			for _, p := range d.pairs(src, key) {
				merged = append(merged, [3]*yaml.Node{p[0], p[1], k})
			}
		}
	}
	return append(own, merged...)
}

func fieldNamed(fields []yamlField, name string) (yamlField, bool) {
	for _, f := range fields {
		if f.name == name {
			return f, true
		}
	}
	return yamlField{}, false
}

func namesOf(fields []yamlField) []string {
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = f.name
	}
	return out
}

func names(fields []yamlField) string { return strings.Join(namesOf(fields), ", ") }

func joinKey(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// suggest returns the name of valid that s most likely misspells: the same
// name in another case, else the closest within a few edits; "" if none.
func suggest(s string, valid []string) string {
	best, bestD := "", -1
	for _, v := range valid {
		if strings.EqualFold(s, v) {
			return v
		}
		dist := editDistance(strings.ToLower(s), strings.ToLower(v))
		if dist <= max(1, len(v)/3) && (bestD < 0 || dist < bestD) {
			best, bestD = v, dist
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b)) // not a misspelling of a key
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// errUnsetVar is wrapped by the error of a ${VAR} whose VAR is not set.
var errUnsetVar = errors.New("not set")

// expandVars expands the variables of s: ${VAR} is VAR's value (an error
// when it is not set), ${VAR:-default} default when VAR is not set or
// empty, and $$ one $. Any other $ is itself.
func expandVars(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '$')
		if i < 0 || i == len(s)-1 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			s = s[i+2:]
			continue
		case '{':
		default:
			b.WriteByte('$')
			s = s[i+1:]
			continue
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", fmt.Errorf("%q has a ${ without its }: write ${VAR}, ${VAR:-default}, or $$ for a $", s[i:])
		}
		ref := s[i+2 : i+end]
		name, def, hasDef := strings.Cut(ref, ":-")
		if !validVarName(name) {
			return "", fmt.Errorf("${%s}: %q is not a variable name (letters, digits and _, not starting with a digit; a default is given as ${VAR:-default})", ref, name)
		}
		val, set := lookup(name)
		switch {
		case hasDef && val == "":
			val = def
		case !set:
			return "", fmt.Errorf("variable %s is %w: set it in the environment, or give a default: ${%s:-value}", name, errUnsetVar, name)
		}
		b.WriteString(val)
		s = s[i+end+1:]
	}
}

func validVarName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
