package config

import (
	"encoding"
	"fmt"
	"maps"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"
)

// sourced is a value that came from the environment or the command line
// rather than the file: always a string, and problems name where it came
// from.
type sourced struct {
	value  string
	origin string // "IDEMPOTENCY_PROXY_UPSTREAM_URL", "--upstream", "command line"
}

// decoder turns the merged raw tree into a Config, recording every problem
// with its path instead of stopping at the first.
type decoder struct {
	problems []*Problem
	// origins has every path a layer set, with where the value came from:
	// "" for the file, "from IDEMPOTENCY_PROXY_…" or "from --flag" otherwise.
	origins map[string]string
	// defaults is the decoded defaults policy routes start from.
	defaults *Policy
	// within is where the document being decoded came from, when a
	// variable or flag gave a whole one (IDEMPOTENCY_PROXY_ROUTES): every
	// value in it came from there.
	within string
}

func newDecoder() *decoder { return &decoder{origins: map[string]string{}} }

func (d *decoder) add(path string, raw any, format string, args ...any) {
	reason := fmt.Sprintf(format, args...)
	if s, ok := raw.(sourced); ok {
		reason += " (from " + s.origin + ")"
	} else if d.within != "" {
		reason += " (from " + d.within + ")"
		// Not the file's: Load must not name the file's line for it.
		d.origins[path] = "from " + d.within
	}
	d.problems = append(d.problems, &Problem{Path: path, Reason: reason})
}

// mapping decodes raw, which must be a mapping, into the struct v. Known
// keys are decoded in field order, so later fields may depend on earlier
// ones (routes start from the decoded defaults); unknown keys are problems.
func (d *decoder) mapping(path string, raw any, v reflect.Value) {
	m, ok := asMap(raw)
	if !ok {
		d.add(path, raw, "must be a mapping, not %s", describe(raw))
		return
	}
	fields := fieldsOf(v.Type())
	known := make([]string, len(fields))
	failed := map[string]bool{}
	for i, f := range fields {
		known[i] = f.key
		item, ok := m[f.key]
		if !ok || item == nil {
			continue
		}
		before := len(d.problems)
		d.value(join(path, f.key), item, v.FieldByIndex(f.index), f.option)
		failed[f.key] = len(d.problems) > before
	}
	// One of two alternative keys replaces whatever the other held, the
	// inherited value included; both set in one mapping is left to the
	// policy's check, which reports it. A value that did not decode
	// replaces nothing: the other key keeps its value rather than fail
	// again, empty, under its own name.
	for _, f := range fields {
		if _, set := m[f.key]; !set || f.alt == "" || failed[f.key] {
			continue
		}
		if _, both := m[f.alt]; both {
			continue
		}
		for _, g := range fields {
			if g.key == f.alt {
				alt := v.FieldByIndex(g.index)
				alt.SetZero()
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(known, k) {
			d.add(join(path, k), nil, "unknown key%s", didYouMean(k, known, "."))
		}
	}
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	urlType      = reflect.TypeFor[*url.URL]()
	routesType   = reflect.TypeFor[[]Route]()

	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// value decodes one key into v by its type, or by the tag option where the
// type alone does not say how the value is written.
func (d *decoder) value(path string, raw any, v reflect.Value, option string) {
	switch s, ok := raw.(sourced); {
	case ok:
		d.origins[path] = "from " + s.origin
	case d.within != "":
		d.origins[path] = "from " + d.within
	default:
		d.origins[path] = ""
	}
	switch v.Type() {
	case durationType:
		duration(d, path, raw, v)
		return
	case urlType:
		urlValue(d, path, raw, v)
		return
	case routesType:
		d.routes(path, raw, v)
		return
	}
	if v.Kind() == reflect.Map && v.Type().Key().Kind() == reflect.String && v.Type().Elem() == durationType {
		durations(d, path, raw, v)
		return
	}
	if u, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
		text(d, path, raw, u)
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.mapping(path, raw, v)
	case reflect.String:
		str(d, path, raw, v, option)
	case reflect.Bool:
		boolean(d, path, raw, v)
	case reflect.Int:
		integer(d, path, raw, v)
	case reflect.Int64:
		if option != "size" {
			panic("config: int64 field " + path + " needs the size option")
		}
		size(d, path, raw, v)
	case reflect.Slice:
		switch elem := v.Type().Elem(); {
		case reflect.PointerTo(elem).Implements(textUnmarshaler):
			textList(d, path, raw, v)
		case elem.Kind() == reflect.String:
			strs(d, path, raw, v, option)
		case elem.Kind() == reflect.Int && option == "status":
			statuses(d, path, raw, v)
		default:
			panic("config: no decoder for " + path)
		}
	default:
		panic("config: no decoder for " + path)
	}
}

// routes decodes the routes list; each route starts as a copy of the
// (already decoded) defaults, so whatever it does not set is inherited and a
// list it sets replaces the inherited one.
func (d *decoder) routes(path string, raw any, v reflect.Value) {
	if s, ok := raw.(sourced); ok {
		parsed, twin, err := parseRoutesDocument(s.value)
		if err != nil {
			d.add(path, raw, "invalid YAML or JSON list: %v", err)
			return
		}
		if twin != nil {
			d.add(twin.path, raw, "%s", twin.reason())
			d.origins[twin.path] = "from " + s.origin // not the file's line
			return
		}
		if parsed == nil {
			// A variable set from a ConfigMap or Secret without its key
			// is empty: read as no routes, it would drop the file's.
			d.add(path, raw, "empty: write [] for no routes")
			return
		}
		raw = parsed
		d.within = s.origin
		defer func() { d.within = "" }()
	}
	items, ok := raw.([]any)
	if !ok {
		d.add(path, raw, "must be a list, not %s", describe(raw))
		return
	}
	routes := make([]Route, len(items))
	for i, item := range items {
		routes[i] = Route{Enabled: true, Policy: clonePolicy(*d.defaults)}
		d.mapping(fmt.Sprintf("%s[%d]", path, i), item, reflect.ValueOf(&routes[i]).Elem())
	}
	v.Set(reflect.ValueOf(routes))
}

// clonePolicy returns a copy that shares no slice with p, so a route can
// change its lists without touching the defaults it inherited them from.
func clonePolicy(p Policy) Policy {
	v := reflect.ValueOf(&p).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Slice && !f.IsNil() {
			c := reflect.MakeSlice(f.Type(), f.Len(), f.Len())
			reflect.Copy(c, f)
			f.Set(c)
		}
	}
	return p
}

// asMap accepts both map shapes YAML decoders produce, lower-casing keys
// because keys are case-insensitive, as in the rest of the file.
func asMap(raw any) (map[string]any, bool) {
	out := map[string]any{}
	switch m := raw.(type) {
	case map[string]any:
		for k, v := range m {
			out[strings.ToLower(k)] = v
		}
	case map[any]any:
		for k, v := range m {
			out[strings.ToLower(fmt.Sprint(k))] = v
		}
	default:
		return nil, false
	}
	return out, true
}

func describe(raw any) string {
	switch raw.(type) {
	case string, sourced:
		return "a string"
	case []any:
		return "a list"
	case map[string]any, map[any]any:
		return "a mapping"
	case bool:
		return "a boolean"
	case literal, int, int64, uint64, float64:
		return "a number"
	default:
		return fmt.Sprintf("%v", raw)
	}
}

// scalar returns raw as text for strings and numbers: YAML decodes
// `ttl: 30` as an int, the environment always gives strings.
func scalar(raw any) (string, bool) {
	switch v := raw.(type) {
	case string:
		return v, true
	case sourced:
		return v.value, true
	case literal:
		return string(v), true
	case int, int64, uint64, float64, bool:
		return fmt.Sprint(v), true
	}
	return "", false
}
