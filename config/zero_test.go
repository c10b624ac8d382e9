package config

import (
	"reflect"
	"strings"
	"testing"
)

// A duration set to 0 is refused with its key, unless the documentation
// gives 0 a meaning: read as "unset", it would put the default in force
// without a word.
func TestZeroDurationIsRefusedUnlessZeroMeansOff(t *testing.T) {
	off := map[string]bool{
		"defaults.churn_window": true, // 0 turns churn counting off
	}
	var keys []string
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for _, f := range fieldsOf(typ) {
			switch {
			case f.group():
				walk(join(prefix, f.key), f.typ)
			case f.typ == durationType:
				keys = append(keys, join(prefix, f.key))
			}
		}
	}
	walk("", reflect.TypeFor[Config]())
	if len(keys) < 10 {
		t.Fatalf("found only %d duration keys: %q", len(keys), keys)
	}
	// Every key in use: a duration only a feature reads (wait_timeout
	// under concurrent: wait) is checked while that feature is on.
	inUse := []string{
		"IDEMPOTENCY_PROXY_UPSTREAM_URL=http://127.0.0.1:3000",
		"IDEMPOTENCY_PROXY_STORE_REDIS_URL=redis://127.0.0.1:6390/0",
		"IDEMPOTENCY_PROXY_STORE_REDIS_REPLICA_ACK=1",
		"IDEMPOTENCY_PROXY_DEFAULTS_EXPIRED_KEYS=reject",
		"IDEMPOTENCY_PROXY_DEFAULTS_CONCURRENT=wait",
		"IDEMPOTENCY_PROXY_DEFAULTS_ON_UPSTREAM_ERROR=reconcile",
		"IDEMPOTENCY_PROXY_DEFAULTS_RECONCILE_REQUEST=GET /v1/charges?key={key}",
	}
	if _, err := Load(Source{Env: inUse}); err != nil {
		t.Fatalf("every key in use, at its default: %v", err)
	}
	for _, key := range keys {
		_, err := Load(Source{
			Env:       inUse,
			Overrides: map[string]string{key: "0s"},
		})
		switch {
		case off[key] && err != nil:
			t.Errorf("%s: 0 turns it off, but Load refused it: %v", key, err)
		case !off[key] && (err == nil || !strings.Contains(err.Error(), key+": ")):
			t.Errorf("%s: 0 was not refused with its key: %v", key, err)
		}
	}
}
