package config

import (
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/idempotency-proxy/idempotency-proxy/internal/enum"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// storeKind is one field of Store: a kind of store and its section.
type storeKind struct {
	name      string
	index     []int
	addresses []string // its address keys, in field order: "url", "addrs"
}

var storeOptionsType = reflect.TypeFor[store.Options]()

// storeKinds are the kinds in field order, read from Store's fields; the
// first is the one used when nothing selects another.
var storeKinds = sync.OnceValue(func() []storeKind {
	var out []storeKind
	for _, f := range fieldsOf(reflect.TypeFor[Store]()) {
		if !f.typ.Implements(storeOptionsType) {
			continue
		}
		k := storeKind{name: f.key, index: f.index}
		for _, g := range fieldsOf(f.typ) {
			if g.address {
				k.addresses = append(k.addresses, g.key)
			}
		}
		out = append(out, k)
	}
	return out
})

func kindNames() []string {
	ks := storeKinds()
	names := make([]string, len(ks))
	for i, k := range ks {
		names[i] = k.name
	}
	return names
}

func findKind(name string) (storeKind, bool) {
	for _, k := range storeKinds() {
		if k.name == name {
			return k, true
		}
	}
	return storeKind{}, false
}

// defaultStore has every kind's own defaults and no Kind.
func defaultStore() Store {
	var s Store
	v := reflect.ValueOf(&s).Elem()
	for _, k := range storeKinds() {
		f := v.FieldByIndex(k.index)
		f.Set(reflect.ValueOf(f.Interface().(store.Options).Defaults()))
	}
	return s
}

// options returns the options of kind k in s.
func (s Store) options(k storeKind) store.Options {
	return reflect.ValueOf(s).FieldByIndex(k.index).Interface().(store.Options)
}

// Options returns the options of the store in use (Kind, as Load sets it).
// The wiring opens the store with them.
func (s Store) Options() store.Options {
	k, ok := findKind(s.kind())
	if !ok {
		return nil
	}
	return s.options(k)
}

// addressed returns the address keys of k that are set in s, dotted.
func (s Store) addressed(k storeKind) []string {
	opts := reflect.ValueOf(s).FieldByIndex(k.index)
	var out []string
	for _, g := range fieldsOf(opts.Type()) {
		if !g.address {
			continue
		}
		if f := opts.FieldByIndex(g.index); !f.IsZero() && !(f.Kind() == reflect.Slice && f.Len() == 0) {
			out = append(out, "store."+k.name+"."+g.key)
		}
	}
	return out
}

// kind resolves an empty Kind: the kind whose address is set, else the
// first kind (memory). Two kinds with an address is ambiguous: it resolves
// to "" and checkStore reports it.
func (s Store) kind() string {
	if s.Kind != "" {
		return s.Kind
	}
	var found []string
	for _, k := range storeKinds() {
		if len(s.addressed(k)) > 0 {
			found = append(found, k.name)
		}
	}
	switch len(found) {
	case 0:
		return storeKinds()[0].name
	case 1:
		return found[0]
	}
	return ""
}

// checkStore reports the kind (unknown, ambiguous, or without the address
// it needs) and every kind's own problems, each under its section.
func checkStore(v *validation, s Store) {
	kind := s.kind()
	k, known := findKind(kind)
	switch {
	case kind == "":
		var set []string
		for _, k := range storeKinds() {
			set = append(set, s.addressed(k)...)
		}
		v.add("store.kind", "%s are both set: set store.kind to the one to use", strings.Join(set, " and "))
	case !known:
		v.add("store.kind", "%v", &enum.Error{Given: kind, Words: kindNames()})
	case len(k.addresses) > 0 && len(s.addressed(k)) == 0:
		keys := make([]string, len(k.addresses))
		for i, a := range k.addresses {
			keys[i] = "store." + k.name + "." + a
		}
		v.add("store.kind", "%s needs %s: set %s", kind, strings.Join(keys, " or "), setWith(keys[0]))
	}
	checkEmptyAddresses(v, s)
	for _, k := range storeKinds() {
		section := "store." + k.name
		for _, p := range s.options(k).Check(section) {
			v.add(section+"."+p.Key, "%s", p.Reason)
		}
	}
}

// checkEmptyAddresses refuses a store address that a flag or the
// environment gives empty while nothing else chooses the store: a Secret
// without its key gives its variable an empty value, and read as "no
// address" it would run every replica on a memory store of its own, each
// executing again the retries another one recorded.
func checkEmptyAddresses(v *validation, s Store) {
	if _, chosen := v.origins["store.kind"]; chosen {
		return
	}
	for _, k := range storeKinds() {
		for _, a := range k.addresses {
			key := "store." + k.name + "." + a
			if v.origins[key] != "" && !slices.Contains(s.addressed(k), key) {
				v.add(key, "empty, so no store would be selected and every key kept in this process's memory: give the store's address, or set store.kind: memory")
			}
		}
	}
}

// applyLayerKind lets a layer (the environment, the flags) that sets a
// store's address without store.kind select that store: --redis-url
// switches the store to Redis even over a file that says "kind: memory". A
// layer that sets the addresses of two kinds drops the kind of the layers
// below, so that checkStore reports the ambiguity instead of one winning.
func applyLayerKind(tree map[string]any, layer map[string]sourced) {
	if _, ok := layer["store.kind"]; ok {
		return
	}
	var kinds []string
	var origin string
	for _, k := range storeKinds() {
		for _, a := range k.addresses {
			if v, ok := layer["store."+k.name+"."+a]; ok && strings.TrimSpace(v.value) != "" {
				if !slices.Contains(kinds, k.name) {
					kinds = append(kinds, k.name)
				}
				origin = v.origin
			}
		}
	}
	switch len(kinds) {
	case 0:
	case 1:
		set(tree, "store.kind", sourced{value: kinds[0], origin: origin})
	default:
		unset(tree, "store.kind")
	}
}
