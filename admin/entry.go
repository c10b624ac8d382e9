package admin

import (
	"encoding/hex"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/grpcwire"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// entryJSON is one key as the key API shows it. The fields of a completed
// record are omitted for a lease, and a lease's holder for a record.
type entryJSON struct {
	KeyHash   string `json:"key_hash"`
	State     string `json:"state"`
	ExpiresAt string `json:"expires_at"`
	// The request the key belongs to, when its lease or record says
	// (those written by versions before they kept it do not): never its
	// query or body.
	Method    string `json:"method,omitempty"`
	Host      string `json:"host,omitempty"`
	Path      string `json:"path,omitempty"`
	Route     string `json:"route,omitempty"`
	StartedAt string `json:"started_at,omitempty"`
	// The proxy process holding a lease, and its request's trace id when
	// tracing is on.
	Instance  string              `json:"instance,omitempty"`
	TraceID   string              `json:"trace_id,omitempty"`
	CreatedAt string              `json:"created_at,omitempty"`
	Status    int                 `json:"status,omitempty"`
	Headers   map[string][]string `json:"headers,omitempty"`
	Trailers  map[string][]string `json:"trailers,omitempty"`
	BodyBytes *int                `json:"body_bytes,omitempty"`
	// GRPC names a recorded gRPC call: its protocol, its method (the
	// request's path, /package.Service/Method) and its answer's status.
	GRPC        *grpcJSON `json:"grpc,omitempty"`
	BodyOmitted *bool     `json:"body_omitted,omitempty"`
	// SealedBy is the id of the encryption key that sealed the record.
	SealedBy string `json:"sealed_by,omitempty"`
	// Unreadable is why a record cannot be read (key_unknown,
	// auth_failed, format): its headers are then not shown, and of one
	// whose bytes do not decode nothing but its key and expiry.
	Unreadable string `json:"unreadable,omitempty"`
	// ScopeHash tells the clients of a record apart: a hash of its
	// request's scope values (Authorization...), never the values.
	ScopeHash string `json:"scope_hash,omitempty"`

	// Settling is set for a key whose unknown outcome is being settled
	// by lookups of the upstream (on_upstream_error: reconcile).
	Settling *settlingJSON `json:"settling,omitempty"`
}

// grpcJSON is what the key API shows of a recorded gRPC call.
type grpcJSON struct {
	Method string `json:"method"`
	Status string `json:"status,omitempty"`
}

// grpcCall describes rec when it answered a gRPC call (its Content-Type
// says so), else nil.
func grpcCall(rec *store.Record) *grpcJSON {
	ct := rec.Header["Content-Type"]
	if len(ct) != 1 || !grpcwire.IsGRPC(ct[0]) {
		return nil
	}
	out := &grpcJSON{Method: rec.Request.Path}
	if code, ok := grpcwire.Status(rec.Header, rec.Trailer); ok {
		out.Status = code.String()
	}
	return out
}

// settlingJSON is what the key API shows of a key being settled: since
// when, and, when this process settles it, the lookups it sent.
type settlingJSON struct {
	Since  string `json:"since"`
	Probes *int64 `json:"probes,omitempty"`
}

type listJSON struct {
	Keys       []entryJSON `json:"keys"`
	NextCursor string      `json:"next_cursor"`
}

func newEntryJSON(e store.Entry) entryJSON {
	out := entryJSON{KeyHash: e.Key, State: e.State.String(), ExpiresAt: rfc3339(e.ExpiresAt)}
	if e.Unreadable != nil {
		out.Unreadable = store.UnreadableReason(e.Unreadable)
	}
	if e.State == store.InFlight {
		out.describe(e.Lease.Request)
		out.Instance, out.TraceID = e.Lease.Instance, e.Lease.TraceID
		return out
	}
	if e.State != store.Completed || e.Record == nil {
		return out
	}
	rec := e.Record
	out.describe(rec.Request)
	n, omitted := e.BodyBytes, rec.BodyOmitted
	out.CreatedAt = rfc3339(rec.CreatedAt)
	out.Status = rec.Status
	out.Headers = redacted(rec.Header)
	if len(rec.Trailer) > 0 {
		out.Trailers = redacted(rec.Trailer)
	}
	out.GRPC = grpcCall(rec)
	out.BodyBytes, out.BodyOmitted = &n, &omitted
	out.SealedBy = e.SealedBy
	if !rec.Lookup.IsZero() {
		out.ScopeHash = hex.EncodeToString(rec.Lookup.Scope[:])
	}
	return out
}

// describe sets the fields of the request the key belongs to.
func (out *entryJSON) describe(q store.Request) {
	out.Method, out.Host, out.Path, out.Route = q.Method, q.Host, q.Path, q.Route
	out.StartedAt = rfc3339(q.StartedAt)
}

// secretHeaders are response headers whose values are credentials the
// upstream issued to an end user: the key API shows that they were
// recorded, never their values.
var secretHeaders = map[string]bool{"Set-Cookie": true, "Set-Cookie2": true, "Authorization": true, "Proxy-Authorization": true}

// redactedValue replaces each value of a secret header.
const redactedValue = "[redacted]"

// redacted returns h with the values of secretHeaders replaced, leaving h
// (the store's record) untouched.
func redacted(h map[string][]string) map[string][]string {
	out := make(map[string][]string, len(h))
	for name, values := range h {
		if secretHeaders[name] {
			masked := make([]string, len(values))
			for i := range masked {
				masked[i] = redactedValue
			}
			values = masked
		}
		out[name] = values
	}
	return out
}

// rfc3339 formats t in UTC with milliseconds, the precision records keep.
func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}
