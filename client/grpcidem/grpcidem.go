// Package grpcidem is the Go client's gRPC side: a unary client interceptor
// that gives every logical call an idempotency key, sent as the
// idempotency-key metadata, and retries the call with that same key as
// clients/contract.json says (docs/clients.md, "gRPC"). It is a package of
// its own so that package client links nothing but the standard library.
//
// Use it instead of, not with, a service config retryPolicy: grpc-go's own
// retries resend the metadata the interceptor set, so they are safe behind
// the proxy too, but they do not know its answers (a stop problem such as
// payload-mismatch is FAILED_PRECONDITION, which a policy would not retry
// anyway; an in-flight ABORTED is retried only if listed).
package grpcidem

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idempotency-proxy/idempotency-proxy/client"
)

// Metadata fields the proxy reads and writes.
const (
	// KeyField carries the call's idempotency key.
	KeyField = "idempotency-key"
	// ReplayedField is "true" on a recorded answer replayed by the proxy.
	ReplayedField = "idempotent-replayed"
	// PushbackField is the proxy's retry advice, in milliseconds.
	PushbackField = "grpc-retry-pushback-ms"
)

// Options configure the interceptor. The zero value works.
type Options struct {
	// MaxAttempts is how many times one logical call may be sent, the
	// first included; 0 means client.DefaultMaxAttempts.
	MaxAttempts int
	// BaseDelay is the backoff before the second attempt, doubled on each
	// retry, when the answer gives no pushback; 0 means
	// client.DefaultBaseDelay. MaxDelay caps every wait, pushback
	// included; 0 means client.DefaultMaxDelay.
	BaseDelay, MaxDelay time.Duration
	// Methods, when not empty, are the full method names (/pkg.Service/
	// Method) the interceptor handles; others pass through untouched.
	Methods []string
	// OnRetry, when set, is called before each wait between two attempts
	// with the attempt's number and error: for logs and metrics. It must
	// not block.
	OnRetry func(attempt int, err error)
}

// retryCodes are the statuses without a proxy problem type that a call is
// retried on: the gRPC statuses that mean "not processed" (the proxy's
// default release_grpc_statuses; a lost connection is UNAVAILABLE).
var retryCodes = []codes.Code{codes.Unavailable, codes.Aborted, codes.ResourceExhausted}

// problemBase prefixes the proxy's problem types in grpc-message.
const problemBase = "https://idempotency-proxy.dev/problems/"

// UnaryClientInterceptor returns the interceptor. A call whose outgoing
// metadata already carries an idempotency-key keeps it (a key of the
// caller's operation, client.KeyFor); any other gets client.NewKey(), once
// per logical call, the same for each of its attempts.
func UnaryClientInterceptor(o Options) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if len(o.Methods) > 0 && !slices.Contains(o.Methods, method) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(KeyField)) == 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, KeyField, client.NewKey())
		}
		for n := 1; ; n++ {
			var header, trailer metadata.MD
			err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&header), grpc.Trailer(&trailer))...)
			retry, pushback, ok := decide(err, header, trailer)
			if !retry || n >= o.maxAttempts() || ctx.Err() != nil {
				return err
			}
			if o.OnRetry != nil {
				o.OnRetry(n, err)
			}
			if !sleep(ctx, o.delay(n, pushback, ok)) {
				return err
			}
		}
	}
}

// decide says whether an attempt's answer is retried, and the proxy's
// pushback when it sent one.
func decide(err error, header, trailer metadata.MD) (retry bool, pushback time.Duration, ok bool) {
	if err == nil || first(header, ReplayedField) == "true" || first(trailer, ReplayedField) == "true" {
		return false, 0, false // the operation's answer, or its replay
	}
	if v := first(trailer, PushbackField); v != "" {
		if ms, perr := strconv.ParseInt(v, 10, 64); perr == nil && ms >= 0 {
			// Clamped before multiplying, as client's Retry-After is: a huge
			// value would wrap to a negative wait.
			pushback, ok = time.Duration(min(ms, int64(24*time.Hour/time.Millisecond)))*time.Millisecond, true
		}
	}
	st := status.Convert(err)
	if t, _, found := strings.Cut(st.Message(), ": "); found && strings.HasPrefix(t, problemBase) {
		if retried, known := client.ProblemRetried(t); known {
			return retried, pushback, ok
		}
	}
	return slices.Contains(retryCodes, st.Code()), pushback, ok
}

func (o Options) maxAttempts() int {
	if o.MaxAttempts > 0 {
		return o.MaxAttempts
	}
	return client.DefaultMaxAttempts
}

// delay is the wait after the n-th attempt: the proxy's pushback, else
// exponential backoff with full jitter; both capped by MaxDelay.
func (o Options) delay(n int, pushback time.Duration, ok bool) time.Duration {
	maxDelay := o.MaxDelay
	if maxDelay <= 0 {
		maxDelay = client.DefaultMaxDelay
	}
	if ok {
		return min(pushback, maxDelay)
	}
	base := o.BaseDelay
	if base <= 0 {
		base = client.DefaultBaseDelay
	}
	ceiling := maxDelay
	if n-1 < 62 && base <= maxDelay>>(n-1) {
		ceiling = base << (n - 1)
	}
	if ceiling <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(ceiling)))
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func first(md metadata.MD, k string) string {
	if v := md.Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}
