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
	}
}
