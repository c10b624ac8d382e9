package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// sourced is a value that came from the environment or a flag rather than
// the file: always a string, and problems name where it came from.
type sourced struct {
	value  string
	origin string // "IDEMPOTENCY_PROXY_UPSTREAM_URL", "flag"
}

// decoder turns the merged raw tree into a Config, recording every problem
// with its path instead of stopping at the first.
type decoder struct {
	problems []*Problem
}

func (d *decoder) add(path string, raw any, format string, args ...any) {
	reason := fmt.Sprintf(format, args...)
	if s, ok := raw.(sourced); ok {
		reason += " (from " + s.origin + ")"
	}
	d.problems = append(d.problems, &Problem{Path: path, Reason: reason})
}

// field is one key of a mapping: a leaf with a decode func, or a group of
// nested fields.
type field struct {
	name   string
	decode func(d *decoder, path string, raw any)
	group  []field
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// mapping decodes raw, which must be a mapping, against fields. Known keys
// are decoded in the order of fields, so later fields may depend on earlier
// ones (routes inherit from the decoded defaults); unknown keys are problems.
func (d *decoder) mapping(path string, raw any, fields []field) {
	m, ok := asMap(raw)
	if !ok {
		d.add(path, raw, "must be a mapping, not %s", describe(raw))
		return
	}
	known := make(map[string]bool, len(fields))
	for _, f := range fields {
		known[f.name] = true
		v, ok := m[f.name]
		if !ok || v == nil {
			continue
		}
		if f.group != nil {
			d.mapping(join(path, f.name), v, f.group)
		} else {
			f.decode(d, join(path, f.name), v)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !known[k] {
			d.add(join(path, k), nil, "unknown key")
		}
	}
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
	case int, int64, uint64, float64:
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
	case int, int64, uint64, float64, bool:
		return fmt.Sprint(v), true
	}
	return "", false
}

func str(dst *string) func(*decoder, string, any) {
	return func(d *decoder, path string, raw any) {
		switch v := raw.(type) {
		case string:
			*dst = v
		case sourced:
			*dst = v.value
		default:
			d.add(path, raw, "must be a string, not %s", describe(raw))
		}
	}
}

func boolean(dst *bool) func(*decoder, string, any) {
	return func(d *decoder, path string, raw any) {
		if b, ok := raw.(bool); ok {
			*dst = b
			return
		}
		s, _ := scalar(raw)
		b, err := strconv.ParseBool(s)
		if err != nil {
			d.add(path, raw, "must be true or false, not %q", s)
			return
		}
		*dst = b
	}
}

// duration accepts Go duration strings only: a bare number would be
// nanoseconds to time.Duration, which is never what "ttl: 30" means.
func duration(dst *time.Duration) func(*decoder, string, any) {
	return func(d *decoder, path string, raw any) {
		s, ok := scalar(raw)
		if !ok {
			d.add(path, raw, "invalid duration: %s", describe(raw))
			return
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			d.add(path, raw, "invalid duration %q (want e.g. 250ms, 30s, 24h)", s)
			return
		}
		*dst = v
	}
}

func size(dst *Size) func(*decoder, string, any) {
	return func(d *decoder, path string, raw any) {
		s, ok := scalar(raw)
		if !ok {
			d.add(path, raw, "invalid size: %s", describe(raw))
			return
		}
		v, err := ParseSize(s)
		if err != nil {
			d.add(path, raw, "%v", err)
			return
		}
		*dst = v
	}
}

func logLevel(dst *Config) func(*decoder, string, any) {
	return func(d *decoder, path string, raw any) {
		s, _ := scalar(raw)
		// slog also accepts "warn+2" and the like; the contract is four words.
		if !slices.Contains(logLevels, strings.ToLower(s)) || dst.LogLevel.UnmarshalText([]byte(s)) != nil {
			d.add(path, raw, "must be one of %s", strings.Join(logLevels, ", "))
		}
	}
}

var logLevels = []string{"debug", "info", "warn", "error"}

func urlValue(dst **url.URL) func(*decoder, string, any) {
	return func(d *decoder, path string, raw any) {
		var s string
		str(&s)(d, path, raw)
		if s == "" {
			return
		}
		u, err := url.Parse(s)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			d.add(path, raw, "invalid URL %q: %v", s, err)
			return
		}
		*dst = u
	}
}

// list accepts a YAML sequence or a comma-separated string (the form
// environment variables and flags use).
func list(d *decoder, path string, raw any) ([]string, bool) {
	if s, ok := raw.(sourced); ok {
		raw = s.value
	}
	if s, ok := raw.(string); ok {
		out := []string{}
		for part := range strings.SplitSeq(s, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
		return out, true
	}
	items, ok := raw.([]any)
	if !ok {
		d.add(path, raw, "must be a list, not %s", describe(raw))
		return nil, false
	}
	out := make([]string, 0, len(items))
	good := true
	for i, item := range items {
		s, ok := scalar(item)
		if !ok {
			d.add(fmt.Sprintf("%s[%d]", path, i), item, "must be a string, not %s", describe(item))
			good = false
		}
		out = append(out, s)
	}
	return out, good
}

func strs(dst *[]string) func(*decoder, string, any) {
	return func(d *decoder, path string, raw any) {
		if v, ok := list(d, path, raw); ok {
			*dst = v
		}
	}
}

// headers canonicalises names so "content-type" and "Content-Type" are one
// header everywhere downstream.
func headers(dst *[]string) func(*decoder, string, any) {
	return func(d *decoder, path string, raw any) {
		v, ok := list(d, path, raw)
		if !ok {
			return
		}
		for i, name := range v {
			v[i] = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(name))
		}
		*dst = v
	}
}

func header(dst *string) func(*decoder, string, any) {
	return func(d *decoder, path string, raw any) {
		var s string
		str(&s)(d, path, raw)
		*dst = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(s))
	}
}

func methods(dst *[]string) func(*decoder, string, any) {
	return func(d *decoder, path string, raw any) {
		v, ok := list(d, path, raw)
		if !ok {
			return
		}
		for i, m := range v {
			v[i] = strings.ToUpper(strings.TrimSpace(m))
		}
		*dst = v
	}
}

func statuses(dst *[]int) func(*decoder, string, any) {
	return func(d *decoder, path string, raw any) {
		v, ok := list(d, path, raw)
		if !ok {
			return
		}
		out := make([]int, 0, len(v))
		for i, s := range v {
			n, err := strconv.Atoi(s)
			if err != nil || n < 100 || n > 599 {
				d.add(fmt.Sprintf("%s[%d]", path, i), raw, "invalid HTTP status %q (want 100..599)", s)
				ok = false
			}
			out = append(out, n)
		}
		if ok {
			*dst = out
		}
	}
}

// validToken reports whether s is an RFC 9110 token, the syntax of both
// header names and methods.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c >= math.MaxInt8 || c <= ' ' || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}
