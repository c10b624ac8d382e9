package config

import (
	"bytes"
	"encoding"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idempotency-proxy/idempotency-proxy/internal/bytesize"
)

// Origins of a value in the view, as its line comment shows them.
const (
	OriginFlag     = "flag"     // "flag --upstream"
	OriginEnv      = "env"      // "env IDEMPOTENCY_PROXY_UPSTREAM_URL"
	OriginFile     = "file"     // the configuration file
	OriginDefault  = "default"  // the built-in default
	OriginInherits = "defaults" // a route's value inherited from defaults
)

// masked replaces a secret in the view and in reload logs.
const masked = "xxxxx"

// Setting is one key of the effective configuration: its dotted path, its
// value as the view shows it (secrets masked) and where it came from.
type Setting struct {
	Key    string
	Value  string // "24h", "[POST, PUT]", "redis://:xxxxx@cache:6379/0"
	Origin string // "file", "default", "defaults", "env NAME", "flag --NAME"
	secret string // the unmasked value, when Value masks it
}

// View returns the effective configuration as YAML: every key in file
// order, with a line comment saying where its value came from, secrets
// masked (the admin token, URL passwords). With the masks replaced it is a
// configuration file that loads to the same configuration.
//
// started, when not nil, is the configuration the process started with: a
// key whose change needs a restart says so, and the value still in force.
func (c *Config) View(started *Config) []byte {
	w := &viewWalk{origins: c.origins}
	if started != nil {
		w.pending = map[string]string{}
		running := map[string]string{}
		for _, s := range started.Settings() {
			running[s.Key] = s.Value
		}
		for _, k := range c.RestartNeeded(started) {
			w.pending[k] = running[k]
		}
	}
	root := w.mapping("", reflect.ValueOf(c).Elem(), false)
	root.HeadComment = "effective configuration; each value's origin: file, env, flag, default (built in), defaults (a route's value inherited)"
	if c.File != "" {
		root.HeadComment += "\nfile: " + c.File
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}); err != nil {
		// Every node is a scalar, a sequence or a mapping of them.
		panic("config: view: " + err.Error())
	}
	enc.Close()
	return out.Bytes()
}

// Settings returns every key of the effective configuration in file
// order, routes' keys as "routes[1].ttl".
func (c *Config) Settings() []Setting {
	_, settings := c.walk()
	return settings
}

// Change is a key whose value a reload changed, secrets masked. Old or New
// is "(unset)" for a key that appeared or went away (a route added or
// removed).
type Change struct {
	Key     string `json:"key"`
	Old     string `json:"old"`
	New     string `json:"new"`
	Restart bool   `json:"restart,omitempty"` // takes effect only after a restart
}

// Changes lists the keys whose value differs between old and c, in file
// order, and whether each waits for a restart: whether its new value
// differs from the one the process started with (RestartNeeded against
// started, not old), so an edit back to the running value waits for
// nothing.
func (c *Config) Changes(old, started *Config) []Change {
	restart := map[string]bool{}
	for _, k := range c.RestartNeeded(started) {
		restart[k] = true
	}
	before := map[string]Setting{}
	for _, s := range old.Settings() {
		before[s.Key] = s
	}
	var out []Change
	seen := map[string]bool{}
	for _, s := range c.Settings() {
		seen[s.Key] = true
		o, ok := before[s.Key]
		switch {
		case !ok:
			out = append(out, Change{Key: s.Key, Old: "(unset)", New: s.Value})
		case o.Value != s.Value || o.secret != s.secret:
			out = append(out, Change{Key: s.Key, Old: o.Value, New: s.Value, Restart: restart[s.Key]})
		}
	}
	for _, o := range old.Settings() {
		if !seen[o.Key] {
			out = append(out, Change{Key: o.Key, Old: o.Value, New: "(unset)"})
		}
	}
	return out
}

// walk builds the view's mapping and the flat list of settings together.
func (c *Config) walk() (*yaml.Node, []Setting) {
	w := &viewWalk{origins: c.origins}
	return w.mapping("", reflect.ValueOf(c).Elem(), false), w.settings
}

type viewWalk struct {
	origins  map[string]string // Load's: path → "" (file) or "from NAME"
	pending  map[string]string // key → the value in force until a restart
	settings []Setting
}

func (w *viewWalk) mapping(prefix string, v reflect.Value, inRoute bool) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for _, f := range fieldsOf(v.Type()) {
		key := join(prefix, f.key)
		fv := v.FieldByIndex(f.index)
		var val *yaml.Node
		switch {
		case f.group() && fv.Type() != urlType:
			val = w.mapping(key, fv, inRoute)
		case fv.Type() == routesType:
			val = &yaml.Node{Kind: yaml.SequenceNode}
			for i := range fv.Len() {
				val.Content = append(val.Content, w.mapping(fmt.Sprintf("%s[%d]", key, i), fv.Index(i), true))
			}
			if fv.Len() == 0 {
				val.Style = yaml.FlowStyle
				val.LineComment = w.origin(key, false)
			}
		default:
			val = w.leaf(key, fv, f, inRoute)
		}
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: f.key}, val)
	}
	return n
}

// leaf renders one value and records its setting.
func (w *viewWalk) leaf(key string, v reflect.Value, f field, inRoute bool) *yaml.Node {
	var n *yaml.Node
	switch {
	case v.Kind() == reflect.Slice && v.Type() != reflect.TypeFor[[]byte]():
		n = &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for i := range v.Len() {
			n.Content = append(n.Content, scalarNode(v.Index(i), f.option))
		}
	case v.Kind() == reflect.Map:
		n = &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k.String(), Tag: "!!str", Style: yaml.DoubleQuotedStyle},
				scalarNode(v.MapIndex(k), f.option))
		}
	default:
		n = scalarNode(v, f.option)
	}
	s := Setting{Key: key, Origin: w.origin(key, inRoute)}
	if isSecret(f, n.Value) {
		s.secret, n.Value = n.Value, masked
	} else if n.Kind == yaml.ScalarNode {
		if m := maskURL(n.Value); m != n.Value {
			s.secret, n.Value = n.Value, m
		}
	}
	switch n.Kind {
	case yaml.SequenceNode:
		items := make([]string, len(n.Content))
		for i, item := range n.Content {
			items[i] = item.Value
		}
		s.Value = "[" + strings.Join(items, ", ") + "]"
	case yaml.MappingNode:
		items := make([]string, 0, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			items = append(items, n.Content[i].Value+": "+n.Content[i+1].Value)
		}
		s.Value = "{" + strings.Join(items, ", ") + "}"
	default:
		s.Value = n.Value
	}
	n.LineComment = s.Origin
	if running, ok := w.pending[key]; ok {
		n.LineComment += "; needs a restart, running with " + running
	}
	w.settings = append(w.settings, s)
	return n
}

// origin names where the value at key came from. A route's items set by
// IDEMPOTENCY_PROXY_ROUTES came from there, key by key.
func (w *viewWalk) origin(key string, inRoute bool) string {
	if inRoute {
		if o, ok := w.origins["routes"]; ok && o != "" {
			return originName(o)
		}
	}
	o, ok := w.origins[key]
	switch {
	case ok:
		return originName(o)
	case inRoute && !strings.HasSuffix(key, ".match") && !strings.HasSuffix(key, ".enabled"):
		return OriginInherits
	}
	return OriginDefault
}

// originName turns the decoder's "from --upstream", "from NAME" or ""
// into the view's words.
func originName(o string) string {
	src, ok := strings.CutPrefix(o, "from ")
	switch {
	case !ok:
		return OriginFile
	case strings.HasPrefix(src, "--"):
		return OriginFlag + " " + src
	case src == "command line":
		return OriginFlag
	}
	return OriginEnv + " " + src
}

// shown is a value as the configuration writes it.
func shown(v reflect.Value, option string) string {
	switch x := v.Interface().(type) {
	case time.Duration:
		return formatDuration(x)
	case *url.URL:
		if x == nil {
			return ""
		}
		return x.Redacted()
	case encoding.TextMarshaler:
		b, err := x.MarshalText()
		if err != nil {
			return "invalid: " + err.Error()
		}
		return string(b)
	}
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int64:
		if option == "size" {
			return bytesize.Format(v.Int())
		}
	}
	return fmt.Sprint(v.Interface())
}

// formatDuration drops the zero units time.Duration.String keeps:
// 24h0m0s is 24h, 1m30s stays.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// scalarNode is v as a YAML scalar: booleans and numbers plain, strings
// quoted where YAML would read them as something else.
func scalarNode(v reflect.Value, option string) *yaml.Node {
	s := shown(v, option)
	switch v.Kind() {
	case reflect.Bool:
		if s == "true" || s == "false" {
			return &yaml.Node{Kind: yaml.ScalarNode, Value: s, Tag: "!!bool"}
		}
	case reflect.Int:
		if _, err := strconv.Atoi(s); err == nil {
			return &yaml.Node{Kind: yaml.ScalarNode, Value: s, Tag: "!!int"}
		}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Value: s, Tag: "!!str", Style: scalarStyle(s)}
}

// scalarStyle quotes what YAML would read as something else: "", "true",
// "8080", ":8080".
func scalarStyle(s string) yaml.Style {
	var probe any
	if s == "" || yaml.Unmarshal([]byte(s), &probe) != nil {
		return yaml.DoubleQuotedStyle
	}
	if _, ok := probe.(string); !ok || probe.(string) != s {
		return yaml.DoubleQuotedStyle
	}
	return 0
}

// isSecret reports whether the value of f is a secret: a key tagged
// `secret:"yes"`, or named like one (token, password). A file that holds a
// secret (admin.token_file) is a path, shown as it is.
func isSecret(f field, value string) bool {
	if value == "" {
		return false
	}
	if f.secret {
		return true
	}
	return f.key == "token" || strings.Contains(f.key, "password") || strings.Contains(f.key, "secret")
}

// maskURL masks the password of a URL with one (redis://:pw@host,
// postgres://user:pw@host/db); anything else is returned as it is.
func maskURL(s string) string {
	if !strings.Contains(s, "://") || !strings.Contains(s, "@") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		// Too broken to parse: the part before the last "@" may be a
		// password.
		return masked + s[strings.LastIndex(s, "@"):]
	}
	return u.Redacted()
}
