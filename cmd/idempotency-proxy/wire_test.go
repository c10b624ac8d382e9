package main

import (
	"encoding"
	"encoding/json"
	"maps"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/config"
	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store/redisstore"

	"github.com/idempotency-proxy/idempotency-proxy/internal/grpcwire"
	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

// The configuration's built-in defaults, translated, are the defaults of the
// packages that use them: one owner per fact.
func TestConfiguredDefaultsAreTheHandlerAndStoreDefaults(t *testing.T) {
	cfg := config.Default()
	def, _ := policies(cfg)
	if want := proxy.DefaultPolicy(); !reflect.DeepEqual(def, want) {
		t.Errorf("default policy =\n%+v\nwant proxy.DefaultPolicy()\n%+v", def, want)
	}
	if got := handlerOptions(cfg, nil, nil, nil).UpstreamTimeout; got != proxy.DefaultUpstreamTimeout {
		t.Errorf("upstream timeout = %s, want proxy.DefaultUpstreamTimeout %s", got, proxy.DefaultUpstreamTimeout)
	}
	if r := cfg.Store.Redis; r.KeyPrefix != redisstore.DefaultKeyPrefix || r.Timeout != redisstore.DefaultTimeout {
		t.Errorf("redis key_prefix %q timeout %s, want redisstore's %q %s", r.KeyPrefix, r.Timeout, redisstore.DefaultKeyPrefix, redisstore.DefaultTimeout)
	}
}

// Every field of proxy.Policy is a configuration key and reaches the
// handler: a file setting each key to a value other than the default yields
// a policy in which no field has its default left. A field without a key,
// or one the wiring drops, fails here.
func TestTranslationSetsEveryPolicyField(t *testing.T) {
	def := proxy.DefaultPolicy()
	keys := map[string]any{}
	typ := reflect.TypeFor[proxy.Policy]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag, ok := f.Tag.Lookup("config")
		if !ok {
			t.Errorf("proxy.Policy.%s has no config tag: it cannot be configured", f.Name)
			continue
		}
		key, option, _ := strings.Cut(tag, ",")
		keys[key] = otherValue(t, f.Name, reflect.ValueOf(def).Field(i), option)
	}
	// header is the shorthand of key_sources: one place sets one of them,
	// and setting key_sources clears the header it replaces.
	delete(keys, "header")
	route := maps.Clone(keys)
	route["match"] = "/sets-every-key/"
	doc, err := json.Marshal(map[string]any{
		"upstream": map[string]any{"url": "http://127.0.0.1:3000"},
		// async: allow needs a secret to sign status URLs with.
		"async_secret": "0123456789abcdef0123456789abcdef",
		"defaults":     keys,
		"routes":       []any{map[string]any{"match": "/inherits/"}, route},
	})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "every-key.yaml")
	writeFile(t, file, string(doc))
	cfg, err := config.Load(config.Source{File: file})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	got, routes := policies(cfg)
	for _, p := range []proxy.Policy{got, routes[0].Policy, routes[1].Policy} {
		v, d := reflect.ValueOf(p), reflect.ValueOf(def)
		for i := range v.NumField() {
			if reflect.DeepEqual(v.Field(i).Interface(), d.Field(i).Interface()) {
				t.Errorf("%s = %v: the configured value did not reach the handler", typ.Field(i).Name, v.Field(i).Interface())
			}
		}
	}
}

// otherValue returns a configuration value, different from the default v,
// for a field of the given kind.
func otherValue(t *testing.T, name string, v reflect.Value, option string) any {
	t.Helper()
	if v.Type() == reflect.TypeFor[proxy.StatusTTL]() {
		return map[string]any{"5xx": "1m"}
	}
	switch name {
	case "Reconcile":
		return map[string]any{"request": "GET /v1/charges?key={key}", "headers": []string{"X-Other"},
			"found": []int{201}, "found_status": 201, "absent": []int{410}, "resend": true,
			"after": "3s", "every": "3s", "for": "1m", "then": "release"}
	case "AmbiguousStatuses":
		return []int{502} // a status in release_statuses too is refused
	}
	if u, ok := v.Interface().(encoding.TextMarshaler); ok {
		// The other word of a two-word choice.
		other := reflect.New(v.Type()).Elem()
		switch v.Kind() {
		case reflect.Bool:
			other.SetBool(!v.Bool())
		default:
			other.SetUint(1 - v.Uint())
		}
		b, err := other.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil || other.Interface() == u {
			t.Fatalf("%s: no other value", name)
		}
		return string(b)
	}
	switch {
	case v.Type() == reflect.TypeFor[time.Duration]():
		return (time.Duration(v.Int()) + 7*time.Second).String()
	case v.Kind() == reflect.Bool:
		return !v.Bool()
	case v.Kind() == reflect.Int64 && option == "size":
		return v.Int() + 1
	case v.Kind() == reflect.Int:
		return v.Int() + 1
	case v.Kind() == reflect.String && option == "header":
		return "X-Other-" + v.String()
	case v.Kind() == reflect.Slice && option == "header":
		return []string{"X-Other"}
	case v.Kind() == reflect.Slice && option == "method":
		return []string{"GET"}
	case v.Kind() == reflect.Slice && option == "status":
		return []int{418}
	case v.Type() == reflect.TypeFor[[]proxy.KeySource]():
		return []string{"json:/id", "header:X-Delivery"}
	case v.Type() == reflect.TypeFor[[]proxy.ScopeHeader]():
		return []string{"X-Tenant", "Cookie:sid"}
	case v.Type() == reflect.TypeFor[[]grpcwire.Code]():
		return []string{"INTERNAL"}
	case v.Type() == reflect.TypeFor[[]jsonread.Pointer]():
		return []string{"/sent_at"}
	}
	t.Fatalf("%s: no test value for %s (option %q); add one here", name, v.Type(), option)
	return nil
}

func TestMissingUpstreamNamesItsFlagAndVariable(t *testing.T) {
	code, _, errs := runBinary(t, nil, "--validate")
	if code != 2 || !strings.Contains(errs, "upstream.url: required: set it with --upstream or IDEMPOTENCY_PROXY_UPSTREAM_URL") {
		t.Fatalf("exit %d, stderr %q; want 2 naming --upstream and IDEMPOTENCY_PROXY_UPSTREAM_URL", code, errs)
	}
}

func TestNearMissVariableSuggestsTheKey(t *testing.T) {
	code, _, errs := runBinary(t, []string{"IDEMPOTENCY_PROXY_UPSTREAM=http://127.0.0.1:3000"}, "--validate")
	want := "IDEMPOTENCY_PROXY_UPSTREAM: unknown environment variable; did you mean IDEMPOTENCY_PROXY_UPSTREAM_URL?"
	if code != 2 || !strings.Contains(errs, want) {
		t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errs, want)
	}
}
