package config

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/idempotency-proxy/idempotency-proxy/internal/enum"
)

// Source is where Load reads from. Later layers win key by key:
// Overrides > Env > File > built-in defaults.
type Source struct {
	// File is the configuration file; "" reads the file named by
	// IDEMPOTENCY_PROXY_CONFIG in Env, if any, else none.
	File string
	// Env is an os.Environ()-style list; nil means no environment.
	Env []string
	// Overrides are command-line values keyed by dotted config key
	// ("upstream.url", "store.redis.url", "log_level").
	Overrides map[string]string
}

// Load reads, layers, decodes and validates the configuration. On failure
// it returns nil and errors.Join of every *Problem found: unknown
// variables and flags, then decoding problems in file order, then semantic
// ones in file order.
func Load(src Source) (*Config, error) {
	env := environ(src.Env)
	file := src.File
	if file == "" {
		file = env[EnvConfigFile]
	}
	d := newDecoder()
	tree := map[string]any{}
	var lines map[string]int // key path → its line in the file
	fileEmpty := false
	if file != "" {
		t, l, err := readFile(file)
		if err != nil {
			return nil, errors.Join(err)
		}
		tree, lines = t, l
		fileEmpty = len(t) == 0
	}
	applyEnv(d, tree, env)
	applyOverrides(d, tree, src.Overrides)

	cfg := Default()
	cfg.File = file
	cfg.fileEmpty = fileEmpty
	d.defaults = &cfg.Defaults
	d.mapping("", tree, reflect.ValueOf(cfg).Elem())
	if _, set := d.origins["store.kind"]; !set {
		// A kind selected by its address comes from where the address does.
		if k, ok := findKind(cfg.Store.kind()); ok {
			if a := cfg.Store.addressed(k); len(a) > 0 {
				d.origins["store.kind"] = d.origins[a[0]]
			}
		}
	}
	// store.kind is a word like any other: matched in any case, kept as
	// the kind spells it.
	if i, err := enum.Words(kindNames()).Parse(cfg.Store.Kind); err == nil {
		cfg.Store.Kind = kindNames()[i]
	}
	cfg.Store.Kind = cfg.Store.kind()
	cfg.origins = d.origins

	// A value that failed to decode kept its default; checking it again
	// would only add a second, misleading message for the same key.
	problems := d.problems
	for _, p := range cfg.problems(d.origins) {
		if !reported(d.problems, p.Path) {
			problems = append(problems, p)
		}
	}
	if len(problems) > 0 {
		errs := make([]error, len(problems))
		for i, p := range problems {
			// The file's line, when the file gave the value: one set by
			// a flag or the environment is not fixed there.
			if line, ok := lines[p.Path]; ok && d.origins[p.Path] == "" {
				p.File, p.Line = file, line
			}
			errs[i] = p
		}
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

// reported reports whether path, or a mapping or list containing it, already
// has a problem.
func reported(problems []*Problem, path string) bool {
	for _, p := range problems {
		if path == p.Path || strings.HasPrefix(path, p.Path+".") || strings.HasPrefix(path, p.Path+"[") {
			return true
		}
	}
	return false
}

// readFile returns the file as a raw tree with lower-case keys. Viper does
// the parsing and the case folding; decoding is ours, to report exact paths.
// A number in a YAML or JSON file is kept as written (keepNumberText). The
// file is read once: viper's tree and the text it keeps the numbers of are
// one version of a file that a reload may see being rewritten.
//
// It also returns the line of each key path (keyLines), nil for TOML, and
// fails with a *Problem naming the file.
func readFile(path string) (map[string]any, map[string]int, error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, &Problem{Path: path, Reason: err.Error()}
	}
	typ := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	switch typ {
	case "json", "toml", "yaml", "yml":
	default:
		typ = "yaml"
	}
	v := viper.New()
	v.SetConfigType(typ)
	if err := v.ReadConfig(bytes.NewReader(doc)); err != nil {
		if typ != "toml" {
			if line, reason, ok := syntaxProblem(doc); ok && line > 0 {
				return nil, nil, &Problem{Path: path, File: path, Line: line, Reason: reason}
			}
		}
		return nil, nil, &Problem{Path: path, Reason: err.Error()}
	}
	tree := v.AllSettings()
	if typ == "toml" {
		return tree, nil, nil
	}
	keepNumberText(doc, tree)
	lines, twin := keyLines(doc)
	if twin != nil {
		return nil, nil, twin.inFile(path)
	}
	return tree, lines, nil
}

// literal is a number in a YAML or JSON document as written there: YAML
// reads 0x10, 0o20, 020 and 1_000 as 16, 16, 16 and 1000, and 1e3 as 1000,
// but the environment and flags give the text, so a size or a whole number
// read from YAML's value could be accepted from the file and refused from
// the environment, or mean 16 in one and 20 in the other. From the text,
// every source follows one rule: decimal, and a size's binary suffix.
type literal string

// keepNumberText replaces each number viper decoded in tree with its text
// in doc, the same YAML (or JSON) document parsed again as nodes. A
// document that does not parse again leaves tree as it is.
func keepNumberText(doc []byte, tree map[string]any) {
	var root yaml.Node
	if yaml.Unmarshal(doc, &root) != nil || root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return
	}
	literals(root.Content[0], tree)
}

// literals returns v, decoded from n, with every number in it replaced
// by its text. A number is replaced only by the text of the node it was
// decoded from: a key merged from an anchor (<<: *defaults) is found in the
// anchor, a dotted key (defaults.max_response_body) under its parts, and
// text that does not decode to the value viper kept is left alone.
func literals(n *yaml.Node, v any) any {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.MappingNode:
		for _, e := range entries(n, nil, map[string]bool{}) {
			replaceAt(v, e.key, e.value)
		}
	case yaml.SequenceNode:
		if items, ok := v.([]any); ok {
			for i := range min(len(items), len(n.Content)) {
				items[i] = literals(n.Content[i], items[i])
			}
		}
	case yaml.ScalarNode:
		if (n.Tag == "!!int" || n.Tag == "!!float") && sameNumber(n, v) {
			return literal(n.Value)
		}
	}
	return v
}

// entry is a key of a YAML mapping and the node of the value it has.
type entry struct {
	key   string
	value *yaml.Node
}

// entries appends to out the keys mapping n gives a value, each once, with
// the node of the value that wins, as YAML merges: the mapping's own keys
// over merged ones, and an earlier merged mapping over a later one. seen
// has the keys, in lower case, already given.
func entries(n *yaml.Node, out []entry, seen map[string]bool) []entry {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		return out
	}
	var merged []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			if val.Kind == yaml.SequenceNode {
				merged = append(merged, val.Content...)
			} else {
				merged = append(merged, val)
			}
			continue
		}
		if lower := strings.ToLower(k.Value); !seen[lower] {
			seen[lower] = true
			out = append(out, entry{k.Value, val})
		}
	}
	for _, m := range merged {
		out = entries(m, out, seen)
	}
	return out
}

// replaceAt replaces the value at key in the mapping v by its literals
// from val. Viper lower-cases the file's keys but not those of mappings in
// a list, and nests a dotted key under its parts.
func replaceAt(v any, key string, val *yaml.Node) {
	switch m := v.(type) {
	case map[string]any:
		for _, k := range []string{key, strings.ToLower(key)} {
			if item, ok := m[k]; ok {
				m[k] = literals(val, item)
				return
			}
		}
		if parent, last, ok := strings.Cut(strings.ToLower(key), "."); ok {
			if inner, ok := m[parent]; ok {
				replaceAt(inner, last, val)
			}
		}
	case map[any]any:
		if item, ok := m[key]; ok {
			m[key] = literals(val, item)
		}
	}
}

// sameNumber reports whether the scalar n decodes to v, a number viper
// decoded (a JSON file's as float64).
func sameNumber(n *yaml.Node, v any) bool {
	var decoded any
	if n.Decode(&decoded) != nil {
		return false
	}
	a, ok := asFloat(decoded)
	b, ok2 := asFloat(v)
	return ok && ok2 && a == b
}

func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// parseRoutesDocument reads IDEMPOTENCY_PROXY_ROUTES: a YAML block list or a
// JSON array (JSON is YAML), nested under a routes key so viper can read it.
// A document that holds nothing is nil. A key a route gives twice in two
// cases is reported as twin (its path is "routes[i].key"), as the file's
// are: viper would keep one of the two.
func parseRoutesDocument(doc string) (routes any, twin *caseTwin, err error) {
	v := viper.New()
	v.SetConfigType("yaml")
	body := "routes:\n  " + strings.ReplaceAll(strings.TrimSpace(doc), "\n", "\n  ") + "\n"
	if err := v.ReadConfig(strings.NewReader(body)); err != nil {
		return nil, nil, err
	}
	if _, twin := keyLines([]byte(body)); twin != nil {
		return nil, twin, nil
	}
	tree := v.AllSettings()
	keepNumberText([]byte(body), tree)
	// An empty document (or only comments) holds nothing, not an empty
	// list: nil, which the caller refuses.
	return tree["routes"], nil, nil
}

// environ keeps the IDEMPOTENCY_PROXY_ variables, and those spelled in
// another case, which the proxy does not read and applyEnv reports; the
// last of duplicates wins, as with os/exec.
func environ(list []string) map[string]string {
	out := map[string]string{}
	for _, kv := range list {
		name, value, ok := strings.Cut(kv, "=")
		if ok && len(name) >= len(EnvPrefix) && strings.EqualFold(name[:len(EnvPrefix)], EnvPrefix) {
			out[name] = value
		}
	}
	return out
}

func applyEnv(d *decoder, tree map[string]any, env map[string]string) {
	keys := envKeys()
	layer := map[string]sourced{}
	for _, name := range slices.Sorted(maps.Keys(env)) {
		if name == EnvConfigFile {
			continue
		}
		key, ok := keys[name]
		if !ok {
			// A typo must not silently leave the default in force.
			d.add(name, nil, "unknown environment variable%s", envHint(name))
			continue
		}
		layer[key] = sourced{value: env[name], origin: name}
	}
	applyLayer(tree, layer)
}

// envHint suggests the variable a near-miss name meant. Known names are
// in file order, so a group named instead of its key suggests its first key.
func envHint(name string) string {
	known := []string{strings.TrimPrefix(EnvConfigFile, EnvPrefix)}
	for _, k := range Keys() {
		known = append(known, strings.TrimPrefix(EnvVar(k), EnvPrefix))
	}
	if s := suggest(strings.ToUpper(name[len(EnvPrefix):]), known, "_"); s != "" {
		return "; did you mean " + EnvPrefix + s + "?"
	}
	return ""
}

func applyOverrides(d *decoder, tree map[string]any, overrides map[string]string) {
	layer := map[string]sourced{}
	for _, key := range slices.Sorted(maps.Keys(overrides)) {
		if !isKey(key) {
			d.add(key, nil, "unknown key (from command line)%s", didYouMean(key, Keys(), "."))
			continue
		}
		origin := "command line"
		if f := flagOf(key); f != "" {
			origin = "--" + f
		}
		layer[key] = sourced{value: overrides[key], origin: origin}
	}
	applyLayer(tree, layer)
}

// applyLayer puts a layer's values over the tree. A layer that gives a
// store's address without a store kind selects that store, even over a file
// that says "kind: memory": that is what --redis-url promises.
func applyLayer(tree map[string]any, layer map[string]sourced) {
	for _, key := range slices.Sorted(maps.Keys(layer)) {
		set(tree, key, layer[key])
		// A layer that sets one of two alternative keys (header,
		// key_sources) overrides the other in the layers below it.
		if alt := altOf(key); alt != "" {
			if _, ok := layer[alt]; !ok {
				unset(tree, alt)
			}
		}
	}
	applyLayerKind(tree, layer)
}

// unset removes a dotted key from the tree, if it is there.
func unset(tree map[string]any, key string) {
	parts := strings.Split(key, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := tree[p].(map[string]any)
		if !ok {
			return
		}
		tree = next
	}
	delete(tree, parts[len(parts)-1])
}

// set stores v at a dotted key, replacing whatever a lower layer had there,
// even a value of the wrong shape.
func set(tree map[string]any, key string, v any) {
	parts := strings.Split(key, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := tree[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			tree[p] = next
		}
		tree = next
	}
	tree[parts[len(parts)-1]] = v
}
