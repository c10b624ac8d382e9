package grpcidem

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/contract"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/grpctest"
	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// The interceptor decides each of the proxy's problems, told as a gRPC
// status, as clients/contract.json does, and honours its pushback.
func TestInterceptorFollowsTheContract(t *testing.T) {
	c, err := contract.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	if c.ProblemBase != problemBase || c.GRPC.Pushback != PushbackField || c.GRPC.Replayed != ReplayedField {
		t.Fatalf("contract %q %+v; the interceptor reads %q, %q, %q", c.ProblemBase, c.GRPC, problemBase, PushbackField, ReplayedField)
	}
	for _, row := range c.Problems {
		if !row.On(contract.ListenerProxy) {
			continue
		}
		t.Run(row.Type, func(t *testing.T) {
			code, err := row.GRPCCode()
			if err != nil {
				t.Fatal(err)
			}
			answer := status.Error(codes.Code(code), c.ProblemBase+row.Type+": detail")
			trailer := metadata.MD{}
			if row.RetryAfter {
				trailer.Set(PushbackField, "1000")
			}
			retry, pushback, ok := decide(answer, nil, trailer)
			if got := map[bool]string{true: contract.Retry, false: contract.Stop}[retry]; got != row.Client {
				t.Errorf("%v %s: %s, contract says %s", codes.Code(code), row.Type, got, row.Client)
			}
			if ok != row.RetryAfter || ok && pushback != time.Second {
				t.Errorf("pushback %v %v, want it read when the contract says the answer has one", pushback, ok)
			}
			if retry, _, _ := decide(answer, metadata.Pairs(ReplayedField, "true"), nil); retry {
				t.Error("a replayed answer is retried; it is the operation's answer")
			}
		})
	}
	// A status without a problem type, the service's own or a lost
	// connection's, is decided by its code.
	for code := codes.OK; code <= codes.Unauthenticated; code++ {
		var err error
		if code != codes.OK {
			err = status.Error(code, "the service's own")
		}
		want := slices.ContainsFunc(c.GRPC.RetryCodes, func(name string) bool {
			var listed codes.Code
			return listed.UnmarshalJSON([]byte(`"`+name+`"`)) == nil && listed == code
		})
		if retry, _, _ := decide(err, nil, nil); retry != want {
			t.Errorf("the service's own %v: retry %v, contract's retry_codes %v", code, retry, c.GRPC.RetryCodes)
		}
	}
}

// Through the proxy: a call whose key is in flight is answered ABORTED
// with a pushback; the interceptor waits it and retries with the same key,
// and gets the first call's answer replayed. Each logical call has a key
// of its own: the same request sent again as a new call executes again.
func TestInterceptorRetriesInFlightWithTheSameKey(t *testing.T) {
	l := &grpctest.Ledger{Committed: make(chan struct{}, 2), Release: make(chan struct{})}
	addr := grpctest.Serve(t, l)
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	up, _ := url.Parse("http://" + addr)
	h, err := proxy.New(proxy.Options{Upstream: up, UpstreamProtocol: proxy.UpstreamH2C, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ps := httptest.NewUnstartedServer(h)
	ps.Config.Protocols = new(http.Protocols)
	ps.Config.Protocols.SetUnencryptedHTTP2(true)
	ps.Start()
	t.Cleanup(ps.Close)

	var retries []error
	cc, err := grpc.NewClient(strings.TrimPrefix(ps.URL, "http://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(grpctest.Codec{})),
		grpc.WithUnaryInterceptor(UnaryClientInterceptor(Options{OnRetry: func(_ int, err error) {
			retries = append(retries, err)
			close(l.Release) // the first call may answer now
		}})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	call := func(key string) (string, metadata.MD, error) {
		in, out := []byte("card-1"), []byte(nil)
		cctx := ctx
		if key != "" {
			cctx = metadata.AppendToOutgoingContext(ctx, KeyField, key)
		}
		var header metadata.MD
		err := cc.Invoke(cctx, grpctest.Charge, &in, &out, grpc.Header(&header))
		return string(out), header, err
	}
	first := make(chan error, 1)
	go func() { _, _, err := call("order-1"); first <- err }()
	<-l.Committed
	out, header, err := call("order-1")
	if err != nil || out != "charged:card-1" || len(header[ReplayedField]) != 1 {
		t.Fatalf("duplicate: %q %v %v; want the first call's answer, replayed", out, header, err)
	}
	if len(retries) != 1 || status.Code(retries[0]) != codes.Aborted {
		t.Fatalf("retries %v, want one after ABORTED in-flight", retries)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// Two logical calls without a key of the caller's: two keys, two runs.
	for range 2 {
		if _, _, err := call(""); err != nil {
			t.Fatal(err)
		}
		<-l.Committed
	}
	if n := l.Executions.Load(); n != 3 {
		t.Fatalf("%d executions, want 3", n)
	}
}

// A pushback too large for a time.Duration waits MaxDelay, as a large
// Retry-After does in package client: multiplied out, it would wrap to a
// negative wait and the retry would go at once.
func TestHugePushbackWaitsMaxDelay(t *testing.T) {
	o := Options{MaxDelay: time.Minute}
	for _, ms := range []string{"9223372036854775807", "9223372036854775", "86400000000"} {
		answer := status.Error(codes.Aborted, problemBase+"in-flight: detail")
		retry, pushback, ok := decide(answer, nil, metadata.Pairs(PushbackField, ms))
		if !retry || !ok {
			t.Fatalf("pushback %s: retry %v, read %v; want an in-flight retried after its pushback", ms, retry, ok)
		}
		if d := o.delay(1, pushback, ok); d != time.Minute {
			t.Errorf("pushback %s ms: waits %v, want MaxDelay %v", ms, d, time.Minute)
		}
	}
}
