package config

import "reflect"

// RestartNeeded lists the dotted keys whose new value (in c) differs from
// old and cannot take effect without a restart: the listeners are bound, the
// store is connected, the reverse proxy and its transport, the admin handler
// and the tracer are built once. A reload applies the keys tagged
// `reload:"live"` (routes, policies, the log level, the admin token, the
// shutdown timeout); the caller logs the others and keeps running with the
// old listeners and store. A key added to the schema needs a restart
// unless it says otherwise.
func (c *Config) RestartNeeded(old *Config) []string {
	if old == nil {
		return nil
	}
	var keys []string
	var walk func(prefix string, a, b reflect.Value)
	walk = func(prefix string, a, b reflect.Value) {
		for _, f := range fieldsOf(a.Type()) {
			if f.live {
				continue
			}
			key := join(prefix, f.key)
			fa, fb := a.FieldByIndex(f.index), b.FieldByIndex(f.index)
			if f.group() {
				walk(key, fa, fb)
				continue
			}
			if !reflect.DeepEqual(fa.Interface(), fb.Interface()) {
				keys = append(keys, key)
			}
		}
	}
	walk("", reflect.ValueOf(c).Elem(), reflect.ValueOf(old).Elem())
	return keys
}
