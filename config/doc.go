// Package config loads, layers and validates the proxy's configuration.
//
// It is the only package that imports viper, and it is pure: no network, no
// listeners, no store. The main package translates a *Config into the
// options of proxy and store.
//
// # Schema
//
// The Config struct is the schema: a field's `config` tag is its key, a
// nested struct is a mapping, and a `flag` tag names the command-line flag
// that sets the key (Flags). Decoding, the environment variables, unknown-key
// detection and Keys all follow the tags, so a key is added by adding a
// field. A policy (defaults and each route) is the handler's own
// proxy.Policy: its tags are the policy keys, proxy.DefaultPolicy its
// defaults, its typed values (proxy.Concurrency…) parse their own words, and
// proxy.Policy.Check validates it — for Load and for proxy.New alike. A
// store's section is likewise its package's own Options (a store.Options):
// its tags are the keys, its Defaults and Check the defaults and checks, and
// each field of Store after Kind is a kind. The upstream timeout is the
// proxy's default.
//
// # Layers
//
// Every key is taken from the first layer that sets it:
//
//  1. Source.Overrides (command-line flags), keyed by dotted key;
//  2. the environment: IDEMPOTENCY_PROXY_ + the key upper-cased with "_"
//     for ".", e.g. IDEMPOTENCY_PROXY_DEFAULTS_LOCK_TTL for
//     defaults.lock_ttl; names are matched against the known keys, never
//     split, so keys containing underscores are unambiguous;
//  3. the YAML file (Source.File, else the file named by
//     IDEMPOTENCY_PROXY_CONFIG);
//  4. the built-in defaults (Default).
//
// Environment and flag values are strings: lists are comma-separated
// ("POST,PUT"), sizes and durations use the file syntax. The routes list is
// the one exception to per-key layering: IDEMPOTENCY_PROXY_ROUTES (or the
// "routes" override) replaces the file's whole list with a YAML or JSON
// document, e.g. [{"match":"POST /v1/charges","ttl":"72h"}].
//
// A layer (environment or flags) that sets a store's address key (tagged
// `address`: store.redis.url, store.redis.addrs...) but not store.kind also
// sets store.kind to that store, so --redis-url switches the store even over
// a file that says "kind: memory". Without store.kind in any layer, the kind
// whose address is set is used, else memory; two is an error.
//
// # Routes
//
// A route starts as a copy of the effective defaults (after every layer),
// and the keys it sets replace the inherited ones; a list it sets replaces
// the inherited list rather than extending it.
//
// # Strictness
//
// Unknown keys (at any depth, routes included), unknown IDEMPOTENCY_PROXY_
// variables, wrong types, bad durations, sizes and URLs, unknown policy
// words, impossible values and conflicting route patterns are all reported.
// Load returns every problem at once, each a *Problem located by its dotted
// path ("routes[1].ttl"), joined with errors.Join; each wraps ErrInvalid.
// Messages say how to fix the problem: a required key names its flag and
// variable, an unknown key or variable close to a known one is suggested,
// a value from the environment or a flag names it, and a route's problem
// with a value it inherited says "(from defaults)".
package config
