package proxy

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// identity is what identifies a request: how its method and path read, its
// route, its key and where the key came from, its body, its fingerprint
// and storage key, what its lease and record say of it, and the lookup
// that settles its unknown outcome. The steps of ServeHTTP up to identify
// (handler.go, and fingerprintAndKey in fingerprint.go) fill it; from then
// on every step only reads it
// (TestIdentityIsWrittenOnlyUntilIdentify).
type identity struct {
	// target is how the proxy reads in's method and path.
	target target
	route  *route

	key     string        // the idempotency key, as sent
	keyFrom KeySourceKind // the kind of source that gave the key
	body    []byte        // read in full once a source or the fingerprint needs it
	// bodyRead is set when body was read in full before the route was
	// known, for its _method parameters (methodparam.go).
	bodyRead bool
	fp       store.Fingerprint
	keyHash  string // the storage key: the key_hash of logs and the key API
	// desc is what the key's lease and record say of the request.
	desc store.Request
	// probeTarget is the route's lookup filled from this request
	// (reconcile.go), on a route that reconciles.
	probeTarget string
	// grpc is set for a gRPC call on a protected route (grpc.go); grpcWait
	// is its grpc-timeout, 0 when it sent none.
	grpc     bool
	grpcWait time.Duration
}

// request is one request on the proxy path, from route match to its log
// line: its identity, what the decision found, what its log line reports
// and, once it executes its key, its execution. An executed request
// outlives ServeHTTP while its record is retried in the background.
type request struct {
	in    *http.Request
	start time.Time
	identity

	// What the request's log line and metrics report.
	outcome Outcome
	status  int

	// With the access log on: the client's writer, and the status and
	// body bytes sent to it (accesslog.go).
	out       http.ResponseWriter
	sentCode  int
	sentBytes int64
	// upstreamTook is how long the upstream call took, in nanoseconds,
	// once it returned: 0 before, or without one. Atomic: a detached call
	// returns after the client's line may be written.
	upstreamTook atomic.Int64

	// scopeSum is the hash of the scope values once scoped: computed
	// when first asked for (fingerprint.go), as churn and the record do.
	scopeSum [16]byte
	scoped   bool
	// graphql is how a GraphQL route read the request (graphql.go); in
	// the padding after scoped, so that it costs a request no bytes.
	graphql graphqlReading
	// churned is set when the request's fingerprint and scope were sent
	// under another key within churn_window, churnScope being the seeded
	// hash of its scope values (churn.go): key churn, once the store
	// says the key is new.
	churned    bool
	churnScope uint64
	// What the store's answer to Begin says, for the refusals: expiredAt
	// is when the key's record expired (410 key-expired), heldSince when
	// the request holding the key in flight started, as its lease says
	// (409 in-flight; zero when it does not say).
	expiredAt time.Time
	heldSince time.Time

	execState
}

// execState is a request executing its key: the lease it took, its
// upstream call and how the client waits for it, its capture, and the
// settling of its key. serveKeyed notes when Begin was sent and the
// token it acquired; the rest is written by the files that execute the
// key (execute.go, detach.go, lease.go, capture.go, async.go,
// reconcile*.go), and no other (TestExecutionIsWrittenOnlyByTheExecutingFiles).
type execState struct {
	executed bool
	token    string    // the lease's owner token
	began    time.Time // when Begin was sent: the lease runs from then
	returned time.Time // when the upstream call returned
	h        *Handler  // the handler executing it, for its lease (lease.go)
	capture  capture
	lease    execution.Lease
	// bodyReader reads body to the upstream; an executed request is never
	// recycled, so it outlives the transport's reads. Before the route is
	// known it is also what in.Body reads again of a body read whole for
	// its _method parameters (methodparam.go): the same bytes, at no cost
	// of a field more; a request passed through gets a copy of its own
	// (passThrough), as it is recycled.
	bodyReader memoryBody
	done       chan struct{} // closes when the key is settled, waking local waiters
	// settling records the key's record, or releases it, once the call
	// returned.
	settle execution.Settling
	// recon is the settling of the request's unknown outcome
	// (reconcile.go).
	recon *reconciliation
	// pending is the time of the marker written before the request was
	// sent (markPending), until the marker is dropped or written anew;
	// zero without one.
	pending time.Time

	// The upstream call's deadline and how its client waits for it
	// (execution.Call, detach.go).
	call execution.Call
	// detached is the context of the call's store operations, and
	// upstream the request it sends (call).
	detached context.Context
	upstream *http.Request
	// ran holds what the call did, once it returned.
	ran struct {
		outcome Outcome
		status  int
		aborted bool // the reverse proxy panicked: the response was cut
	}
	// reserved is the room this call, or the settlement of its unknown
	// outcome, holds among the detached ones; roomKept is set when the
	// settlement kept the detached call's (startReconcile). reportLater
	// is set when its client left: the request's metrics and log line
	// come when the call ends.
	reserved    int64
	roomKept    bool
	reportLater bool
	// accepted is set when the call's own client was answered 202 with
	// its status URL (executeAsync). lateNote is the released note of a
	// call whose client was not, kept only if a status URL was given to
	// a retry while it ran (asyncreleased.go).
	accepted bool
	lateNote *store.Record
}

// requests recycles request structs of requests that did not execute (a
// replay, a refusal, a pass-through), so that the hot replay path
// allocates none. An executed request is never put back: its lease timer,
// trace hooks and background settling may still hold it.
var requests = sync.Pool{New: func() any { return new(request) }}

// newRequest takes a request from the pool: zero, as New makes it and free
// leaves it, so only the fields a request starts with are set. Clearing
// its 1.3 KB again here doubled the pool's cost.
func newRequest(r *http.Request) *request {
	q := requests.Get().(*request)
	q.in, q.start, q.outcome = r, time.Now(), OutcomePassthrough
	return q
}

func (q *request) free() {
	if !q.executed {
		*q = request{}
		requests.Put(q)
	}
}
