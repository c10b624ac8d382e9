package config

import (
	"encoding"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/enum"
)

// Every key whose value is one of a few words is a type that parses its
// words through package enum: each refuses a word with the same message
// (and its suggestion), and each of its values reads back as its word.
// A new word key written another way fails here.
func TestEveryWordKeyIsAnEnum(t *testing.T) {
	var walk func(path string, typ reflect.Type)
	seen := 0
	walk = func(path string, typ reflect.Type) {
		for _, f := range fieldsOf(typ) {
			key := join(path, f.key)
			typ := f.typ
			if typ.Kind() == reflect.Slice {
				typ = typ.Elem()
			}
			isText := reflect.PointerTo(typ).Implements(textUnmarshaler)
			switch {
			case isText && (typ.Kind() == reflect.Uint8 || typ.Kind() == reflect.Bool):
				seen++
				checkEnum(t, key, typ)
			case typ.Kind() == reflect.Struct && !isText:
				walk(key, typ)
			}
		}
	}
	walk("", reflect.TypeFor[Config]())
	walk("routes[0]", reflect.TypeFor[Route]())
	if seen < 8 {
		t.Errorf("found %d word keys; the walk misses some", seen)
	}
}

func checkEnum(t *testing.T, key string, typ reflect.Type) {
	t.Helper()
	v := reflect.New(typ)
	err := v.Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte("no-such-word"))
	var ee *enum.Error
	if !errors.As(err, &ee) || !strings.HasPrefix(err.Error(), "must be one of ") {
		t.Errorf("%s (%s): a word none of its words gives %v, want an *enum.Error", key, typ, err)
		return
	}
	for i, w := range ee.Words {
		got := reflect.New(typ)
		if err := got.Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(w)); err != nil {
			t.Errorf("%s: its own word %q: %v", key, w, err)
			continue
		}
		b, _ := got.Elem().Interface().(encoding.TextMarshaler).MarshalText()
		if string(b) != w {
			t.Errorf("%s: %q reads back as %q", key, w, b)
		}
		want := reflect.New(typ).Elem()
		if typ.Kind() == reflect.Bool {
			want.SetBool(i == 1)
		} else {
			want.SetUint(uint64(i))
		}
		if got.Elem().Interface() != want.Interface() {
			t.Errorf("%s: %q is %v, want the value of its place in the words, %v", key, w, got.Elem(), want)
		}
		upper := reflect.New(typ)
		if err := upper.Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(strings.ToUpper(w))); err != nil || upper.Elem().Interface() != want.Interface() {
			t.Errorf("%s: %q is %v, %v; want %v, as %q: words match in any case", key, strings.ToUpper(w), upper.Elem(), err, want, w)
		}
	}
}

// A word reads the same in any case from the file and from the
// environment, store.kind included, and is kept as the word is spelled.
func TestWordsMatchInAnyCaseFromEverySource(t *testing.T) {
	file := mustLoad(t, Source{File: writeFile(t, upstreamOnly+
		"log_level: WARN\nstore:\n  kind: Memory\n  memory:\n    when_full: EVICT_OLDEST\ndefaults:\n  concurrent: Wait\n  on_store_error: FAIL_OPEN\n")})
	env := mustLoad(t, Source{Env: []string{
		"IDEMPOTENCY_PROXY_UPSTREAM_URL=http://127.0.0.1:3000",
		"IDEMPOTENCY_PROXY_LOG_LEVEL=Warn",
		"IDEMPOTENCY_PROXY_STORE_KIND=MEMORY",
		"IDEMPOTENCY_PROXY_STORE_MEMORY_WHEN_FULL=Evict_Oldest",
		"IDEMPOTENCY_PROXY_DEFAULTS_CONCURRENT=WAIT",
		"IDEMPOTENCY_PROXY_DEFAULTS_ON_STORE_ERROR=Fail_Open",
	}})
	for name, cfg := range map[string]*Config{"file": file, "environment": env} {
		got := []string{cfg.LogLevel.String(), cfg.Store.Kind, cfg.Store.Memory.WhenFull.String(), cfg.Defaults.Concurrent.String(), cfg.Defaults.OnStoreError.String()}
		want := []string{"warn", StoreMemory, "evict_oldest", "wait", "fail_open"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("from the %s: %q, want %q", name, got, want)
		}
	}
}

// store.kind matches in any case of its ASCII letters only: a kind spelled
// with the long s, which Unicode folds to s, is refused.
func TestStoreKindRefusesUnicodeLookalike(t *testing.T) {
	_, err := Load(Source{Env: []string{
		"IDEMPOTENCY_PROXY_UPSTREAM_URL=http://127.0.0.1:3000",
		"IDEMPOTENCY_PROXY_STORE_KIND=redi\u017f",
		"IDEMPOTENCY_PROXY_STORE_REDIS_URL=redis://127.0.0.1:1/0",
	}})
	if err == nil || !strings.Contains(err.Error(), "store.kind: must be one of") {
		t.Errorf("Load = %v, want store.kind redi\\u017f refused", err)
	}
}
