// Package config loads, layers and validates the proxy's configuration.
//
// It is the only package that imports viper, and it is pure: no network, no
// listeners, no store. The main package translates a *Config into the
// options of proxy and store, so neither of them depends on config keys.
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
// A layer (environment or flags) that sets store.redis.url or
// store.redis.addrs but not store.kind also sets store.kind to redis, so
// --redis-url switches the store even over a file that says "kind: memory".
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
package config
