package proxy

import (
	"net/http"
	"strconv"

	"github.com/idempotency-proxy/idempotency-proxy/internal/grpcwire"
	"github.com/idempotency-proxy/idempotency-proxy/internal/problemjson"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// probStreamingCall refuses a streaming gRPC call on a route that requires
// a key: a stream has no one answer to record, so it cannot be protected.
// Only a gRPC client gets it (as UNIMPLEMENTED).
var probStreamingCall = problem{Type: problemjson.Base + "streaming-call", Title: "Streaming calls cannot be protected", Status: http.StatusNotImplemented}

// grpcCodes is the gRPC status a gRPC client gets for each problem the
// proxy answers: the gRPC column of clients/contract.json, which
// TestEveryProblemHasTheContractsGRPCStatus holds it to. problemFor
// decides the problem; this decides how a gRPC call is told it.
var grpcCodes = map[string]grpcwire.Code{
	probMissingKey.Type:      grpcwire.InvalidArgument,
	probInvalidKey.Type:      grpcwire.InvalidArgument,
	probBadBody.Type:         grpcwire.InvalidArgument,
	probAmbiguousBody.Type:   grpcwire.InvalidArgument,
	probAmbiguousPath.Type:   grpcwire.InvalidArgument,
	probAmbiguousMethod.Type: grpcwire.InvalidArgument,
	probTooLarge.Type:        grpcwire.ResourceExhausted,
	probInFlight.Type:        grpcwire.Aborted,
	probMismatch.Type:        grpcwire.FailedPrecondition,
	probKeyExpired.Type:      grpcwire.FailedPrecondition,
	probUnreadable.Type:      grpcwire.FailedPrecondition,
	probStore.Type:           grpcwire.Unavailable,
	probStoreFull.Type:       grpcwire.Unavailable,
	probUnreachable.Type:     grpcwire.Unavailable,
	probUpstreamError.Type:   grpcwire.Unavailable,
	probUpstreamTimeout.Type: grpcwire.DeadlineExceeded,
	probStatusUnknown.Type:   grpcwire.NotFound,
	probStatusMethod.Type:    grpcwire.Unimplemented,
	probStreamingCall.Type:   grpcwire.Unimplemented,
}

// grpcStatusOf is how a gRPC call is told problem p: its status code, and
// its message, the problem type then the detail, as problem+json has them.
func grpcStatusOf(p problem, detail string) (grpcwire.Code, string) {
	code, ok := grpcCodes[p.Type]
	if !ok {
		code = grpcwire.Internal // TestEveryProblemHasTheContractsGRPCStatus forbids it
	}
	return code, p.Type + ": " + detail
}

// writeGRPCProblem answers a gRPC call with problem p as a status:
// trailers-only, HTTP 200, the same retry advice as Retry-After in
// grpc-retry-pushback-ms.
func writeGRPCProblem(w http.ResponseWriter, p problem, detail string) {
	code, msg := grpcStatusOf(p, detail)
	grpcwire.WriteStatus(w, code, msg, p.RetryAfter*1000)
}

// grpcProblemRecord is the record of problem p for a gRPC call, kept under
// on_upstream_error: keep: the status a replay answers with.
func grpcProblemRecord(p problem, detail string, fp store.Fingerprint) *store.Record {
	code, msg := grpcStatusOf(p, detail)
	h := map[string][]string{
		"Content-Type":        {grpcwire.ContentType},
		grpcwire.StatusField:  {code.Value()},
		grpcwire.MessageField: {grpcwire.EncodeMessage(msg)},
	}
	if p.RetryAfter > 0 {
		h[grpcwire.PushbackField] = []string{strconv.Itoa(p.RetryAfter * 1000)}
	}
	rec := problemRecord(p, detail, fp)
	rec.Status, rec.Header, rec.Body = http.StatusOK, h, nil
	return rec
}
