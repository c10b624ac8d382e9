package config

import (
	"reflect"
	"slices"
	"strings"
	"sync"
)

// field is one key of a mapping, read from a struct field's tags:
// `config:"key[,option]"` and, for keys a flag sets, `flag:"name"`.
type field struct {
	key    string
	option string // how the value is written: "header", "method", "size", "status"
	flag   string
	// alt is the key this one is an alternative to (`alt:"key"`): a
	// mapping that sets one of them resets the other, as a route setting
	// header drops the key_sources it inherited.
	alt string
	// address marks a key that says where a store is (`address:"yes"`):
	// setting it selects its store kind (see store.Options).
	address bool
	// live marks a key a reload applies (`reload:"live"`); every other key
	// needs a restart to take effect (RestartNeeded).
	live bool
	// secret marks a key whose value is masked wherever it is shown
	// (`secret:"yes"`): the view and reload logs.
	secret bool
	index  []int // reflect.Value.FieldByIndex of the struct
	typ    reflect.Type
}

// group reports whether the field is a mapping of further keys.
func (f field) group() bool { return f.typ.Kind() == reflect.Struct }

// fieldsOf returns the keys of a struct type in field order. An embedded
// struct without a tag contributes its keys, as Route does with Policy.
func fieldsOf(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, ok := sf.Tag.Lookup("config")
		if !ok {
			if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
				for _, f := range fieldsOf(sf.Type) {
					f.index = append([]int{i}, f.index...)
					out = append(out, f)
				}
			}
			continue
		}
		key, option, _ := strings.Cut(tag, ",")
		_, address := sf.Tag.Lookup("address")
		out = append(out, field{key: key, option: option, flag: sf.Tag.Get("flag"), alt: sf.Tag.Get("alt"),
			address: address, live: sf.Tag.Get("reload") == "live", secret: sf.Tag.Get("secret") == "yes", index: []int{i}, typ: sf.Type})
	}
	return out
}

// leaf is a key that can be set from the environment or a flag.
type leaf struct {
	key  string // dotted: "upstream.url"
	flag string
	alt  string // dotted: the alternative key, "" when none
}

var leaves = sync.OnceValue(func() []leaf {
	var out []leaf
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for _, f := range fieldsOf(t) {
			if f.group() {
				walk(join(prefix, f.key), f.typ)
				continue
			}
			l := leaf{key: join(prefix, f.key), flag: f.flag}
			if f.alt != "" {
				l.alt = join(prefix, f.alt)
			}
			out = append(out, l)
		}
	}
	walk("", reflect.TypeFor[Config]())
	return out
})

// Keys returns every dotted key that can be set from the environment or a
// flag, in file order ("listen", ..., "upstream.url", ..., "routes").
func Keys() []string {
	ls := leaves()
	keys := make([]string, len(ls))
	for i, l := range ls {
		keys[i] = l.key
	}
	return keys
}

// Flags maps each command-line flag the configuration names to the dotted
// key it sets: "upstream" → "upstream.url". Errors about those keys name the
// flag, so the command line must define exactly these.
func Flags() map[string]string {
	out := map[string]string{}
	for _, l := range leaves() {
		if l.flag != "" {
			out[l.flag] = l.key
		}
	}
	return out
}

func flagOf(key string) string {
	for _, l := range leaves() {
		if l.key == key {
			return l.flag
		}
	}
	return ""
}

// setWith names what sets key besides the file: "--upstream or
// IDEMPOTENCY_PROXY_UPSTREAM_URL".
func setWith(key string) string {
	if f := flagOf(key); f != "" {
		return "--" + f + " or " + EnvVar(key)
	}
	return EnvVar(key)
}

// EnvPrefix starts every environment variable the configuration reads.
const EnvPrefix = "IDEMPOTENCY_PROXY_"

// EnvConfigFile names the configuration file when Source.File is empty.
const EnvConfigFile = EnvPrefix + "CONFIG"

// EnvVar returns the environment variable of a dotted key:
// "defaults.lock_ttl" → IDEMPOTENCY_PROXY_DEFAULTS_LOCK_TTL.
func EnvVar(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// envKeys maps each variable name back to its key. Going from the known keys
// to names (never splitting a name on "_") keeps keys that contain
// underscores unambiguous.
func envKeys() map[string]string {
	out := map[string]string{}
	for _, k := range Keys() {
		out[EnvVar(k)] = k
	}
	return out
}

// altOf returns the dotted key that key is an alternative to, "" if none.
func altOf(key string) string {
	for _, l := range leaves() {
		if l.key == key {
			return l.alt
		}
	}
	return ""
}

func isKey(key string) bool { return slices.Contains(Keys(), key) }

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
