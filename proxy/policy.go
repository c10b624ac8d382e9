package proxy

import (
	"net/http"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/enum"
	"github.com/idempotency-proxy/idempotency-proxy/internal/grpcwire"
	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

// Policy is the idempotency policy of one route.
//
// It is also the schema of a policy in the configuration file: each field's
// `config` tag is its key, and package config decodes, layers and validates
// the keys straight into these fields (docs/configuration.md). A tag option
// says how a value is written when its Go type does not: "header" (header
// names, canonicalised), "method" (upper-cased), "size" (bytes, or a KiB, MiB
// or GiB suffix), "status" (HTTP status codes). Typed values (Concurrency,
// OnStoreError, OnUpstreamError) parse their own words with UnmarshalText.
// Check is the one validation of a policy, for the configuration and New alike.
type Policy struct {
	// Header is the canonical name of the idempotency key header: the
	// shorthand for KeySources [header:NAME]. Set Header or KeySources, not
	// both; in the configuration, a place (the defaults or one route) that
	// sets one of the two keys resets the other.
	Header string `config:"header,header" alt:"key_sources"`
	// KeySources are where the key may come from, in order: the first
	// source present in a request gives its key (docs/request-handling.md,
	// "Where the key comes from"). Empty means [header:Header].
	KeySources []KeySource `config:"key_sources" alt:"header"`
	// Methods are the protected methods; others pass through unchanged.
	Methods []string `config:"methods,method"`
	// RequireKey answers 400 to a protected request without a key.
	RequireKey bool `config:"require_key"`
	// TTL is how long a completed response is replayed.
	TTL time.Duration `config:"ttl"`
	// StatusTTL keeps responses of some statuses or classes for their own
	// time instead of TTL ("5xx": 1m, "404": 10m); the most specific key
	// wins. A route that sets it replaces the inherited map whole.
	StatusTTL StatusTTL `config:"status_ttl"`
	// ExpiredKeys decides a key whose record expired: forget (it is new
	// again) or reject (410 key-expired for ExpiredKeyWindow after).
	ExpiredKeys ExpiredKeys `config:"expired_keys"`
	// ExpiredKeyWindow is how long after its record expires a key is
	// refused under ExpiredKeys reject; a tombstone of the key is kept
	// that long.
	ExpiredKeyWindow time.Duration `config:"expired_key_window"`
	// LockTTL is the lease on an in-flight key, renewed while the upstream runs.
	LockTTL time.Duration `config:"lock_ttl"`
	// Concurrent decides what an in-flight duplicate gets.
	Concurrent Concurrency `config:"concurrent"`
	// WaitTimeout bounds waiting under ConcurrentWait.
	WaitTimeout time.Duration `config:"wait_timeout"`
	// OnStoreError is what a request does when the store is unavailable:
	// FailOpen forwards it without protection, FailClosed answers 503.
	OnStoreError OnStoreError `config:"on_store_error"`
	// OnUpstreamError is what a key becomes when the upstream failed after
	// the request was sent: UpstreamErrorKeep records the proxy's 502
	// (at-most-once), UpstreamErrorRelease releases the key so a retry
	// executes again (at-least-once), UpstreamErrorReconcile asks the
	// upstream through Reconcile.
	OnUpstreamError OnUpstreamError `config:"on_upstream_error"`
	// Reconcile is how an unknown outcome is settled under
	// on_upstream_error: reconcile: the upstream's lookup, and what its
	// answers mean (docs/request-handling.md, "Unknown outcomes").
	Reconcile Reconcile `config:"reconcile"`
	// AmbiguousStatuses are upstream statuses that leave the outcome
	// unknown (a load balancer's 502 for a request that reached the
	// backend): on_upstream_error settles them instead of recording them.
	AmbiguousStatuses []int `config:"ambiguous_statuses,status"`
	// ReleaseStatuses are upstream statuses that mean "not processed": they
	// are delivered but not recorded, and the key is released.
	ReleaseStatuses []int `config:"release_statuses,status"`
	// ReleaseGRPCStatuses are the gRPC statuses of a unary call's answer
	// that mean "not processed", as ReleaseStatuses do for HTTP: delivered,
	// not recorded, the key released. Every other status is an answer,
	// recorded and replayed.
	ReleaseGRPCStatuses []grpcwire.Code `config:"release_grpc_statuses"`
	// MaxRequestBody is the largest request body accepted, in bytes.
	MaxRequestBody int64 `config:"max_request_body,size"`
	// MaxResponseBody is the largest response body recorded, in bytes;
	// larger bodies are delivered but recorded without the body.
	MaxResponseBody int64 `config:"max_response_body,size"`
	// ScopeHeaders namespace keys: the same key under different values of
	// these headers names different operations; an entry may name one
	// cookie instead ("Cookie:NAME").
	ScopeHeaders []ScopeHeader `config:"scope_headers"`
	// FingerprintHeaders join method, path, query and body in the payload fingerprint.
	FingerprintHeaders []string `config:"fingerprint_headers,header"`
	// FingerprintHost makes the request host part of the fingerprint.
	FingerprintHost bool `config:"fingerprint_host"`
	// FingerprintJSON says how a JSON body enters the fingerprint: as sent
	// (raw) or canonical, object members sorted and whitespace dropped. A
	// body that is not JSON is hashed as sent either way.
	FingerprintJSON FingerprintJSON `config:"fingerprint_json"`
	// FingerprintIgnore are JSON pointers left out of a JSON body's
	// fingerprint (a timestamp a sender renews on every retry); any
	// pointer implies FingerprintJSON canonical.
	FingerprintIgnore []jsonread.Pointer `config:"fingerprint_ignore"`
	// ReplayExcludeHeaders are recorded but not replayed.
	ReplayExcludeHeaders []string `config:"replay_exclude_headers,header"`
	// UpstreamControlHeader is the response header through which the
	// upstream may say "no-store": the response is delivered but not
	// recorded and the key is released. The header never reaches a client.
	// "" disables it.
	UpstreamControlHeader string `config:"upstream_control_header,header"`
	// AdvertiseExpiry adds Idempotency-Expires, the HTTP-date at which the
	// key is forgotten, to executed and replayed responses to keyed
	// requests.
	AdvertiseExpiry bool `config:"advertise_expiry"`
	// AmbiguousPaths decides a protected request whose path an upstream
	// may read two ways: an encoded slash or backslash (%2F, %5C), a
	// backslash or a ";" path parameter. Reject answers 400 ambiguous-path.
	AmbiguousPaths AmbiguousPaths `config:"ambiguous_paths"`
	// PathCase insensitive matches the route's pattern in any case of
	// its ASCII letters, for upstreams that do (ASP.NET, IIS).
	PathCase PathCase `config:"path_case"`
	// TrailingSlash same gives the route's policy to its path with a
	// trailing slash too (/v1/charges/ for /v1/charges), as Express,
	// ASP.NET Core and Spring MVC before 6 route it to the same handler;
	// distinct leaves that spelling to the routes it matches as sent.
	TrailingSlash TrailingSlash `config:"trailing_slash"`
	// Mode shadow forwards every request as a plain reverse proxy would
	// and only counts what enforce would have done, while keeping the
	// records (docs/operating.md, "Rolling out in front of a legacy
	// service").
	Mode Mode `config:"mode"`
	// ChurnWindow is how long a request's fingerprint and scope are
	// remembered for key churn: the same ones under another key within
	// it count in idempotency_proxy_key_churn_total. 0 turns it off.
	ChurnWindow time.Duration `config:"churn_window"`
	// ChurnMaxEntries bounds the fingerprints a route remembers for key
	// churn, 16-byte hashes (about 52 bytes each with their map).
	ChurnMaxEntries int `config:"churn_max_entries"`
	// Async allow answers a keyed request that carries Prefer:
	// respond-async 202 Accepted with a status URL once its lease is
	// taken, and runs its upstream call detached (async.go); off ignores
	// the preference.
	Async Async `config:"async"`
	// GraphQL reads the route's protected requests as GraphQL requests:
	// only mutations are protected, queries and subscriptions pass
	// through, the key may come from a mutation's @idempotent(key: …)
	// directive, and the proxy's answers are GraphQL responses
	// (docs/request-handling.md, "GraphQL").
	GraphQL bool `config:"graphql"`
}

// sources returns the key sources in force: KeySources, or the header
// shorthand.
func (p *Policy) sources() []KeySource {
	if len(p.KeySources) > 0 {
		return p.KeySources
	}
	return []KeySource{headerKeySource(p.Header)}
}

// DefaultPolicy returns the built-in policy (docs/configuration.md).
func DefaultPolicy() Policy {
	return Policy{
		Header:                "Idempotency-Key",
		Methods:               []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete},
		TTL:                   24 * time.Hour,
		LockTTL:               30 * time.Second,
		ExpiredKeyWindow:      DefaultExpiredKeyWindow,
		Concurrent:            ConcurrentReject,
		WaitTimeout:           10 * time.Second,
		OnStoreError:          FailClosed,
		OnUpstreamError:       UpstreamErrorRelease,
		ReleaseStatuses:       []int{408, 425, 429, 503},
		ReleaseGRPCStatuses:   []grpcwire.Code{grpcwire.Unavailable, grpcwire.ResourceExhausted, grpcwire.Aborted},
		Reconcile:             DefaultReconcile(),
		AmbiguousStatuses:     []int{},
		MaxRequestBody:        10 << 20,
		MaxResponseBody:       1 << 20,
		ScopeHeaders:          []ScopeHeader{{Header: "Authorization"}},
		FingerprintHeaders:    []string{"Content-Type"},
		FingerprintHost:       true,
		FingerprintIgnore:     []jsonread.Pointer{},
		ReplayExcludeHeaders:  []string{"Date", "Set-Cookie"},
		UpstreamControlHeader: DefaultUpstreamControlHeader,
		ChurnWindow:           DefaultChurnWindow,
		ChurnMaxEntries:       DefaultChurnMaxEntries,
	}
}

// Concurrency is what happens to a request whose key is in flight; in the
// configuration, "reject" or "wait".
type Concurrency uint8

const (
	// ConcurrentReject answers 409 with Retry-After.
	ConcurrentReject Concurrency = iota
	// ConcurrentWait blocks until the first request completes, then replays
	// its response; 409 after Policy.WaitTimeout.
	ConcurrentWait
)

var concurrencyWords = enum.Words{"reject", "wait"}

func (c Concurrency) String() string                { return concurrencyWords.Name(int(c)) }
func (c Concurrency) MarshalText() ([]byte, error)  { return []byte(c.String()), nil }
func (c *Concurrency) UnmarshalText(b []byte) error { return parseWord(c, concurrencyWords, b) }

// OnStoreError is what a protected request gets while the store is
// unavailable; in the configuration, "fail_closed" or "fail_open".
type OnStoreError bool

const (
	// FailClosed answers 503 with Retry-After; the upstream is not called.
	FailClosed OnStoreError = false
	// FailOpen forwards the request without protection.
	FailOpen OnStoreError = true
)

var storeErrorWords = enum.Words{"fail_closed", "fail_open"}

func (o OnStoreError) String() string                { return storeErrorWords.Name(boolIndex(bool(o))) }
func (o OnStoreError) MarshalText() ([]byte, error)  { return []byte(o.String()), nil }
func (o *OnStoreError) UnmarshalText(b []byte) error { return parseBool(o, storeErrorWords, b) }

// OnUpstreamError settles a key whose upstream failed after the request was
// sent, when it may or may not have been processed; in the configuration,
// "release", "keep" or "reconcile".
type OnUpstreamError uint8

const (
	// UpstreamErrorRelease releases the key: a retry executes again
	// (at-least-once).
	UpstreamErrorRelease OnUpstreamError = iota
	// UpstreamErrorKeep records the proxy's 502 and replays it
	// (at-most-once).
	UpstreamErrorKeep
	// UpstreamErrorReconcile keeps the key's lease and asks the upstream
	// what happened (Policy.Reconcile): exactly once, where the upstream
	// offers a lookup.
	UpstreamErrorReconcile
)

var upstreamErrorWords = enum.Words{"release", "keep", "reconcile"}

func (o OnUpstreamError) String() string                { return upstreamErrorWords.Name(int(o)) }
func (o OnUpstreamError) MarshalText() ([]byte, error)  { return []byte(o.String()), nil }
func (o *OnUpstreamError) UnmarshalText(b []byte) error { return parseWord(o, upstreamErrorWords, b) }

// Async says whether a route honours Prefer: respond-async; in the
// configuration, "off" or "allow".
type Async uint8

const (
	// AsyncOff ignores the preference: the request is served as any other.
	AsyncOff Async = iota
	// AsyncAllow answers 202 Accepted with a status URL and runs the call
	// detached.
	AsyncAllow
)

var asyncWords = enum.Words{"off", "allow"}

func (a Async) String() string                { return asyncWords.Name(int(a)) }
func (a Async) MarshalText() ([]byte, error)  { return []byte(a.String()), nil }
func (a *Async) UnmarshalText(b []byte) error { return parseWord(a, asyncWords, b) }

// AmbiguousPaths is what a protected request gets whose path can be read
// two ways (docs/request-handling.md, "Paths and methods"); in the
// configuration, "reject" or "allow".
type AmbiguousPaths uint8

const (
	// AmbiguousReject answers 400 ambiguous-path; the upstream is not called.
	AmbiguousReject AmbiguousPaths = iota
	// AmbiguousAllow handles the request under the route its path
	// matches as sent.
	AmbiguousAllow
)

var ambiguousWords = enum.Words{"reject", "allow"}

func (a AmbiguousPaths) String() string                { return ambiguousWords.Name(int(a)) }
func (a AmbiguousPaths) MarshalText() ([]byte, error)  { return []byte(a.String()), nil }
func (a *AmbiguousPaths) UnmarshalText(b []byte) error { return parseWord(a, ambiguousWords, b) }

// ExpiredKeys is what a request gets whose key's record expired; in the
// configuration, "forget" or "reject".
type ExpiredKeys uint8

const (
	// ExpiredForget treats the key as new: the request executes again.
	ExpiredForget ExpiredKeys = iota
	// ExpiredReject answers 410 key-expired within the policy's
	// ExpiredKeyWindow; the upstream is not called.
	ExpiredReject
)

// DefaultExpiredKeyWindow is how long an expired key is refused by
// default: a week.
const DefaultExpiredKeyWindow = 168 * time.Hour

var expiredWords = enum.Words{"forget", "reject"}

func (e ExpiredKeys) String() string                { return expiredWords.Name(int(e)) }
func (e ExpiredKeys) MarshalText() ([]byte, error)  { return []byte(e.String()), nil }
func (e *ExpiredKeys) UnmarshalText(b []byte) error { return parseWord(e, expiredWords, b) }

// PathCase says whether a route's pattern matches paths in its case only;
// in the configuration, "sensitive" or "insensitive".
type PathCase uint8

const (
	// PathCaseSensitive matches the pattern's letters as written.
	PathCaseSensitive PathCase = iota
	// PathCaseInsensitive matches them in any case (ASCII letters).
	PathCaseInsensitive
)

var pathCaseWords = enum.Words{"sensitive", "insensitive"}

func (c PathCase) String() string                { return pathCaseWords.Name(int(c)) }
func (c PathCase) MarshalText() ([]byte, error)  { return []byte(c.String()), nil }
func (c *PathCase) UnmarshalText(b []byte) error { return parseWord(c, pathCaseWords, b) }

// TrailingSlash says whether a route also takes its path spelled with a
// trailing slash; in the configuration, "same" or "distinct".
type TrailingSlash uint8

const (
	// TrailingSlashSame: /v1/charges/ gets the /v1/charges route.
	TrailingSlashSame TrailingSlash = iota
	// TrailingSlashDistinct: /v1/charges/ is another path.
	TrailingSlashDistinct
)

var trailingSlashWords = enum.Words{"same", "distinct"}

func (s TrailingSlash) String() string                { return trailingSlashWords.Name(int(s)) }
func (s TrailingSlash) MarshalText() ([]byte, error)  { return []byte(s.String()), nil }
func (s *TrailingSlash) UnmarshalText(b []byte) error { return parseWord(s, trailingSlashWords, b) }

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// FingerprintJSON says how a JSON request body enters the payload
// fingerprint (docs/request-handling.md, "What the fingerprint covers").
type FingerprintJSON uint8

const (
	// FingerprintRaw hashes the body's bytes as sent.
	FingerprintRaw FingerprintJSON = iota
	// FingerprintCanonical hashes a JSON body with its object members
	// sorted by name and insignificant whitespace dropped, so a client that
	// re-serialises the same document for a retry still matches. Strings
	// and numbers are hashed as sent: "1.0" and "1" stay different, as they
	// may be to the upstream.
	FingerprintCanonical
)

var fingerprintJSONWords = enum.Words{"raw", "canonical"}

func (f FingerprintJSON) String() string                { return fingerprintJSONWords.Name(int(f)) }
func (f FingerprintJSON) MarshalText() ([]byte, error)  { return []byte(f.String()), nil }
func (f *FingerprintJSON) UnmarshalText(b []byte) error { return parseWord(f, fingerprintJSONWords, b) }

// parseWord sets dst to the value of word b.
func parseWord[T ~uint8](dst *T, words enum.Words, b []byte) error {
	i, err := words.Parse(string(b))
	if err != nil {
		return err
	}
	*dst = T(i)
	return nil
}

// parseBool sets dst to the value of word b, of a two-word choice whose
// second word is true.
func parseBool[T ~bool](dst *T, words enum.Words, b []byte) error {
	i, err := words.Parse(string(b))
	if err != nil {
		return err
	}
	*dst = i == 1
	return nil
}
