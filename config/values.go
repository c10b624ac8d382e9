package config

import (
	"encoding"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/textproto"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idempotency-proxy/idempotency-proxy/internal/bytesize"
)

// The decoders of single values. Each sets v only when raw is valid: a
// value that fails keeps its default, and Load reports it once.

func str(d *decoder, path string, raw any, v reflect.Value, option string) {
	s, ok := stringValue(d, path, raw)
	if !ok {
		return
	}
	v.SetString(normalize(s, option))
}

// normalize writes a name the way the handler compares it: header names
// canonical ("content-type" and "Content-Type" are one header everywhere
// downstream), methods upper case.
func normalize(s, option string) string {
	switch option {
	case "header":
		return textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(s))
	case "method":
		return strings.ToUpper(strings.TrimSpace(s))
	}
	return s
}

func boolean(d *decoder, path string, raw any, v reflect.Value) {
	if b, ok := raw.(bool); ok {
		v.SetBool(b)
		return
	}
	s, _ := scalar(raw)
	b, err := strconv.ParseBool(s)
	if err != nil {
		d.add(path, raw, "must be true or false, not %q", s)
		return
	}
	v.SetBool(b)
}

// integer decodes a whole number, such as a pool size.
func integer(d *decoder, path string, raw any, v reflect.Value) {
	s, ok := scalar(raw)
	n, err := strconv.Atoi(s)
	if !ok || err != nil {
		d.add(path, raw, "must be a whole number, not %s", describeScalar(raw, s, ok))
		return
	}
	v.SetInt(int64(n))
}

func describeScalar(raw any, s string, ok bool) string {
	if ok {
		return strconv.Quote(s)
	}
	return describe(raw)
}

// text decodes a value that parses its own words, such as the policy's
// concurrent, on_store_error and on_upstream_error.
func text(d *decoder, path string, raw any, u encoding.TextUnmarshaler) {
	s, ok := scalar(raw)
	if !ok {
		d.add(path, raw, "must be a string, not %s", describe(raw))
		return
	}
	if err := u.UnmarshalText([]byte(s)); err != nil {
		d.add(path, raw, "%v", err)
	}
}

// duration accepts Go duration strings only: a bare number would be
// nanoseconds to time.Duration, which is never what "ttl: 30" means.
func duration(d *decoder, path string, raw any, v reflect.Value) {
	number(d, path, raw, v, "duration", func(s string) (int64, error) {
		t, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q (want e.g. 250ms, 30s, 24h)", s)
		}
		return int64(t), nil
	})
}

// number decodes a scalar that parse reads as an int64, such as a
// duration or a size; what names it when raw is no scalar.
func number(d *decoder, path string, raw any, v reflect.Value, what string, parse func(string) (int64, error)) {
	s, ok := scalar(raw)
	if !ok {
		d.add(path, raw, "invalid %s: %s", what, describe(raw))
		return
	}
	n, err := parse(s)
	if err != nil {
		d.add(path, raw, "%v", err)
		return
	}
	v.SetInt(n)
}

// durations decodes a mapping of names to durations, such as status_ttl,
// into a new map: a route that sets one replaces what it inherited whole.
// From the environment it is a YAML or JSON mapping, {"5xx": 1m}.
func durations(d *decoder, path string, raw any, v reflect.Value) {
	if s, ok := raw.(sourced); ok {
		parsed := map[any]any{}
		if err := yaml.Unmarshal([]byte(s.value), &parsed); err != nil {
			d.add(path, raw, "invalid YAML or JSON mapping: %v", err)
			return
		}
		raw = parsed
	}
	m, ok := asMap(raw)
	if !ok {
		d.add(path, raw, "must be a mapping, not %s", describe(raw))
		return
	}
	out := reflect.MakeMapWithSize(v.Type(), len(m))
	ok = true
	for _, k := range slices.Sorted(maps.Keys(m)) {
		before := len(d.problems)
		var t time.Duration
		d.origins[join(path, k)] = d.origins[path]
		duration(d, join(path, k), m[k], reflect.ValueOf(&t).Elem())
		if len(d.problems) > before {
			ok = false
			continue
		}
		out.SetMapIndex(reflect.ValueOf(k).Convert(v.Type().Key()), reflect.ValueOf(t))
	}
	if ok {
		v.Set(out)
	}
}

// size decodes an int64 tagged "size".
func size(d *decoder, path string, raw any, v reflect.Value) {
	number(d, path, raw, v, "size", bytesize.Parse)
}

func urlValue(d *decoder, path string, raw any, v reflect.Value) {
	s, ok := stringValue(d, path, raw)
	if !ok {
		return
	}
	if s == "" {
		return
	}
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		d.add(path, raw, "invalid URL %q: %v%s", s, err, schemeHint(s))
		return
	}
	v.Set(reflect.ValueOf(u))
}

// schemeHint suggests the URL a host:port without a scheme was meant to be:
// url.Parse reads "127.0.0.1:3000" as an error and "localhost:3000" as the
// scheme "localhost".
func schemeHint(s string) string {
	host, _, _ := strings.Cut(s, "/")
	if strings.Contains(s, "://") {
		return ""
	}
	if _, _, err := net.SplitHostPort(host); err != nil {
		return ""
	}
	return fmt.Sprintf("; add the scheme: %q", "http://"+s)
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
			d.add(fmt.Sprintf("%s[%d]", path, i), item, "must be a string, not %s%s", describe(item), mappingHint(item))
			good = false
		}
		out = append(out, s)
	}
	return out, good
}

// mappingHint suggests the string a one-entry mapping in a list was meant
// to be: YAML reads "- header: X-GitHub-Delivery" as {header: ...}.
func mappingHint(item any) string {
	m, ok := asMap(item)
	if !ok || len(m) != 1 {
		return ""
	}
	for k, v := range m {
		if s, ok := scalar(v); ok {
			return fmt.Sprintf(`; in YAML "- %s: %s" is a mapping: write "%s:%s" without the space, or quote it`, k, s, k, s)
		}
	}
	return ""
}

func strs(d *decoder, path string, raw any, v reflect.Value, option string) {
	items, ok := list(d, path, raw)
	if !ok {
		return
	}
	out := reflect.MakeSlice(v.Type(), len(items), len(items))
	for i, s := range items {
		out.Index(i).SetString(normalize(s, option))
	}
	v.Set(out)
}

// textList decodes a list of values that parse their own text, each
// problem located by its index.
func textList(d *decoder, path string, raw any, v reflect.Value) {
	items, ok := list(d, path, raw)
	if !ok {
		return
	}
	out := reflect.MakeSlice(v.Type(), len(items), len(items))
	for i, s := range items {
		u := out.Index(i).Addr().Interface().(encoding.TextUnmarshaler)
		if err := u.UnmarshalText([]byte(s)); err != nil {
			d.add(fmt.Sprintf("%s[%d]", path, i), raw, "%v", err)
			ok = false
		}
	}
	if ok {
		v.Set(out)
	}
}

// statuses decodes HTTP status codes (the "status" option).
func statuses(d *decoder, path string, raw any, v reflect.Value) {
	items, ok := list(d, path, raw)
	if !ok {
		return
	}
	out := make([]int, 0, len(items))
	for i, s := range items {
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 || n > 599 {
			d.add(fmt.Sprintf("%s[%d]", path, i), raw, "invalid HTTP status %q (want 100..599)", s)
			ok = false
		}
		out = append(out, n)
	}
	if ok {
		v.Set(reflect.ValueOf(out))
	}
}

// stringValue is raw as a string — from the file, the environment or a
// flag — or a problem at path when it is anything else.
func stringValue(d *decoder, path string, raw any) (string, bool) {
	switch r := raw.(type) {
	case string:
		return r, true
	case sourced:
		return r.value, true
	}
	d.add(path, raw, "must be a string, not %s", describe(raw))
	return "", false
}
