package proxy

import (
	"io"
	"net/http"

	"github.com/idempotency-proxy/idempotency-proxy/internal/enum"
)

// Mode is whether a route enforces idempotency or only watches; in the
// configuration, "enforce" or "shadow".
type Mode uint8

const (
	// ModeEnforce replays, refuses and waits as the policy says.
	ModeEnforce Mode = iota
	// ModeShadow forwards every request and delivers its response
	// unchanged, as a plain reverse proxy would. Keys are still taken and
	// responses recorded, so a switch to enforce starts warm, and what
	// enforce would have answered instead is counted by its Would.
	ModeShadow
)

var modeWords = enum.Words{"enforce", "shadow"}

func (m Mode) String() string                { return modeWords.Name(int(m)) }
func (m Mode) MarshalText() ([]byte, error)  { return []byte(m.String()), nil }
func (m *Mode) UnmarshalText(b []byte) error { return parseWord(m, modeWords, b) }

// Would is the value of the "would" label of
// idempotency_proxy_shadow_total: what a route in enforce mode would have
// answered a request that a shadow route forwarded instead.
type Would string

// Woulds, as documented in docs/operating.md.
const (
	WouldReplay           Would = "replay"            // a recorded response
	WouldConflict         Would = "conflict"          // 409 in-flight, under concurrent: reject
	WouldMismatch         Would = "mismatch"          // 422, the key was used with another payload
	WouldMissingKey       Would = "missing_key"       // 400, require_key and no key
	WouldInvalidKey       Would = "invalid_key"       // 400, a malformed key
	WouldTooLarge         Would = "too_large"         // 413, a body over max_request_body
	WouldAmbiguous        Would = "ambiguous"         // 400 ambiguous-body, -path or -method
	WouldExpiredKey       Would = "expired_key"       // 410, expired_keys: reject
	WouldUnreadable       Would = "unreadable"        // 503 record-unreadable
	WouldStoreUnavailable Would = "store_unavailable" // on_store_error: 503, or forwarded unprotected
)

// allWoulds lists every would, so that each route's series exist from the start.
var allWoulds = []Would{
	WouldReplay, WouldConflict, WouldMismatch, WouldMissingKey, WouldInvalidKey, WouldTooLarge,
	WouldAmbiguous, WouldExpiredKey, WouldUnreadable, WouldStoreUnavailable,
}

// shadowWould is what a shadow route with policy pol counts instead of
// refusing with f; false for the failures it answers as enforce does: a
// request body that could not be read, or an upstream exchange that failed,
// which a plain reverse proxy cannot forward either. A store that could
// not take the key is decided before on_store_error, in storeUnavailable.
// A duplicate of a key in flight is a replay under concurrent: wait, where
// enforce waits for the first request's answer and replays it, and counts
// it so (a wait that would run out is not known when it is forwarded).
func shadowWould(f failure, pol *Policy) (Would, bool) {
	switch f {
	case failMissingKey, failProbeHole, failStreamingCall:
		return WouldMissingKey, true
	case failInvalidKey:
		return WouldInvalidKey, true
	case failBodyTooLarge:
		return WouldTooLarge, true
	case failAmbiguousBody, failAmbiguousPath, failAmbiguousMethod, failAmbiguousGraphQL, failMutationOverGET:
		return WouldAmbiguous, true
	case failMismatch:
		return WouldMismatch, true
	case failInFlight, failInFlightSettling, failWaitedTooLong:
		if pol.Concurrent == ConcurrentWait {
			return WouldReplay, true
		}
		return WouldConflict, true
	case failKeyExpired:
		return WouldExpiredKey, true
	case failRecordUnreadable:
		return WouldUnreadable, true
	}
	return "", false
}

// shadow forwards q, on a route in shadow mode, as a plain reverse proxy
// would, and counts what the route would have answered.
func (h *Handler) shadow(w http.ResponseWriter, q *request, would Would) {
	q.route.metrics.shadow[would].Inc()
	q.route.metrics.report.would(q.start, would)
	if would == WouldStoreUnavailable {
		q.outcome = OutcomeStoreBypassed
	} else {
		q.outcome = OutcomePassthrough
	}
	if q.body != nil {
		setBody(q.in, q.body, nil)
	}
	h.passThrough(q.unrecorded(w), q, q.in)
	dropControlTrailers(w.Header(), q.route.policy.UpstreamControlHeader)
}

// prefixedBody is a request body of which the proxy read the first part
// (body) before it found the body too large: the upstream gets all of it.
func prefixedBody(body []byte, rest io.ReadCloser) io.ReadCloser {
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(newBodyReader(body), rest), rest}
}
