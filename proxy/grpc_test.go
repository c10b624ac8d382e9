package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idempotency-proxy/idempotency-proxy/internal/grpcwire"
	"github.com/idempotency-proxy/idempotency-proxy/internal/problemjson"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/grpctest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// grpcEnv is a gRPC client, the proxy over h2c, and the ledger behind it.
type grpcEnv struct {
	url    string // the proxy's
	ledger *grpctest.Ledger
	proxy  *Handler
	cc     *grpc.ClientConn
}

func newGRPCEnv(t *testing.T, opts ...envOption) *grpcEnv {
	t.Helper()
	return newGRPCEnvServer(t, nil, opts...)
}

// newGRPCEnvServer is newGRPCEnv with the proxy's listener tuned by tune
// before it starts.
func newGRPCEnvServer(t *testing.T, tune func(*http.Server), opts ...envOption) *grpcEnv {
	t.Helper()
	l := &grpctest.Ledger{}
	addr := grpctest.Serve(t, l)
	o := Options{
		Upstream:         mustURL(t, "http://"+addr),
		UpstreamProtocol: UpstreamH2C,
		Default:          DefaultPolicy(),
	}
	for _, f := range opts {
		f(&o)
	}
	if o.Store == nil {
		o.Store = newFlaky(t)
	}
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ps := httptest.NewUnstartedServer(h)
	ps.Config.Protocols = new(http.Protocols)
	ps.Config.Protocols.SetHTTP1(true)
	ps.Config.Protocols.SetUnencryptedHTTP2(true)
	if tune != nil {
		tune(ps.Config)
	}
	ps.Start()
	t.Cleanup(ps.Close)
	cc, err := grpc.NewClient(strings.TrimPrefix(ps.URL, "http://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(grpctest.Codec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &grpcEnv{url: ps.URL, ledger: l, proxy: h, cc: cc}
}

// charge calls Charge with key (none when "") and msg.
func (e *grpcEnv) charge(t *testing.T, key, msg string) (out string, header, trailer metadata.MD, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
	}
	in, reply := []byte(msg), []byte(nil)
	err = e.cc.Invoke(ctx, grpctest.Charge, &in, &reply, grpc.Header(&header), grpc.Trailer(&trailer))
	return string(reply), header, trailer, err
}

func TestGRPCUnaryCallExecutesOnceAndReplaysWithItsTrailers(t *testing.T) {
	e := newGRPCEnv(t)
	out1, h1, tr1, err := e.charge(t, "k1", "order-1")
	if err != nil || out1 != "charged:order-1" || len(h1["idempotent-replayed"]) != 0 {
		t.Fatalf("first call: %q, header %v, %v", out1, h1, err)
	}
	out2, h2, tr2, err := e.charge(t, "k1", "order-1")
	if err != nil || out2 != out1 {
		t.Fatalf("retry: %q, %v; want the first answer %q", out2, err, out1)
	}
	if got := h2["idempotent-replayed"]; len(got) != 1 || got[0] != "true" {
		t.Errorf("retry's header %v, want idempotent-replayed: true", h2)
	}
	if got, want := tr2["x-ledger-entry"], tr1["x-ledger-entry"]; len(got) != 1 || len(want) != 1 || got[0] != want[0] {
		t.Errorf("replayed trailer x-ledger-entry %q, the call's %q", got, want)
	}
	if n := e.ledger.Executions.Load(); n != 1 {
		t.Fatalf("Charge executed %d times, want 1", n)
	}
	// Another key executes; the same key with another message is refused.
	if _, _, _, err := e.charge(t, "k2", "order-1"); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = e.charge(t, "k1", "order-2")
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition || !strings.HasPrefix(st.Message(), problemjson.Base+"payload-mismatch: ") {
		t.Fatalf("key reused for another message: %v, want FAILED_PRECONDITION payload-mismatch", err)
	}
	if n := e.ledger.Executions.Load(); n != 2 {
		t.Fatalf("Charge executed %d times, want 2", n)
	}
}

func TestGRPCRefusalsAreStatusesTheClientReads(t *testing.T) {
	t.Run("in flight: ABORTED with pushback", func(t *testing.T) {
		e := newGRPCEnv(t)
		e.ledger.Committed, e.ledger.Release = make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() { _, _, _, err := e.charge(t, "k", "m"); done <- err }()
		<-e.ledger.Committed
		_, _, tr, err := e.charge(t, "k", "m")
		close(e.ledger.Release)
		if st := status.Convert(err); st.Code() != codes.Aborted || !strings.HasPrefix(st.Message(), problemjson.Base+"in-flight: ") {
			t.Errorf("duplicate in flight: %v, want ABORTED in-flight", err)
		}
		if got := tr["grpc-retry-pushback-ms"]; len(got) != 1 || got[0] != "1000" {
			t.Errorf("pushback %q, want 1000 (Retry-After: 1)", got)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("missing key: INVALID_ARGUMENT", func(t *testing.T) {
		e := newGRPCEnv(t, withPolicy(func(p *Policy) { p.RequireKey = true }))
		_, _, _, err := e.charge(t, "", "m")
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), problemjson.Base+"missing-key: ") {
			t.Fatalf("no key: %v, want INVALID_ARGUMENT missing-key", err)
		}
		if n := e.ledger.Executions.Load(); n != 0 {
			t.Fatalf("executed %d times", n)
		}
	})
	t.Run("too large: RESOURCE_EXHAUSTED", func(t *testing.T) {
		e := newGRPCEnv(t, withPolicy(func(p *Policy) { p.MaxRequestBody = 16 }))
		_, _, _, err := e.charge(t, "k", strings.Repeat("x", 12))
		if st := status.Convert(err); st.Code() != codes.ResourceExhausted {
			t.Fatalf("large message: %v, want RESOURCE_EXHAUSTED", err)
		}
	})
	t.Run("store down: UNAVAILABLE", func(t *testing.T) {
		st := newFlaky(t)
		st.down.Store(true)
		e := newGRPCEnv(t, withStore(st))
		_, _, _, err := e.charge(t, "k", "m")
		if s := status.Convert(err); s.Code() != codes.Unavailable || !strings.HasPrefix(s.Message(), problemjson.Base+"store-unavailable: ") {
			t.Fatalf("store down: %v, want UNAVAILABLE store-unavailable", err)
		}
	})
}

// A gRPC client reads no 202: a call carrying prefer: respond-async on a
// route that allows it waits for its answer as without the preference,
// and a duplicate while it runs is told ABORTED, as any other.
func TestGRPCCallWithRespondAsyncWaitsForItsAnswer(t *testing.T) {
	e := newGRPCEnv(t, func(o *Options) {
		o.AsyncSecret = testAsyncSecret
		o.Default.Async = AsyncAllow
	})
	e.ledger.Committed, e.ledger.Release = make(chan struct{}), make(chan struct{})
	call := func(key string) (string, metadata.MD, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key, "prefer", "respond-async")
		in, reply := []byte("m"), []byte(nil)
		var header metadata.MD
		err := e.cc.Invoke(ctx, grpctest.Charge, &in, &reply, grpc.Header(&header))
		return string(reply), header, err
	}
	type answer struct {
		out string
		err error
	}
	done := make(chan answer, 1)
	go func() { out, _, err := call("k"); done <- answer{out, err} }()
	<-e.ledger.Committed
	_, _, err := call("k")
	close(e.ledger.Release)
	if st := status.Convert(err); st.Code() != codes.Aborted {
		t.Errorf("duplicate in flight: %v, want ABORTED in-flight", err)
	}
	if a := <-done; a.err != nil || a.out != "charged:m" {
		t.Fatalf("first call: %q, %v; want its answer", a.out, a.err)
	}
	out, header, err := call("k")
	if err != nil || out != "charged:m" || len(header["idempotent-replayed"]) != 1 {
		t.Fatalf("retry: %q, %v, header %v; want the answer replayed", out, err, header)
	}
	if n := e.ledger.Executions.Load(); n != 1 {
		t.Fatalf("Charge executed %d times, want 1", n)
	}
}

// A non-OK status is an answer like a 5xx: recorded and replayed, unless
// release_grpc_statuses says it means "not processed".
func TestGRPCStatusesReleasedOrRecorded(t *testing.T) {
	for _, tt := range []struct {
		code codes.Code
		runs int64
	}{{codes.Unavailable, 2}, {codes.Aborted, 2}, {codes.InvalidArgument, 1}, {codes.Internal, 1}} {
		t.Run(tt.code.String(), func(t *testing.T) {
			e := newGRPCEnv(t)
			e.ledger.Answer = func(context.Context) error { return status.Error(tt.code, "declined") }
			for range 2 {
				_, _, _, err := e.charge(t, "k", "m")
				if s := status.Convert(err); s.Code() != tt.code || s.Message() != "declined" {
					t.Fatalf("call: %v, want %v declined", err, tt.code)
				}
			}
			if n := e.ledger.Executions.Load(); n != tt.runs {
				t.Fatalf("executed %d times, want %d", n, tt.runs)
			}
		})
	}
}

// Under on_upstream_error: keep, a call whose answer the upstream cut short
// is recorded as a gRPC status, UNAVAILABLE upstream-failed: a retry is
// replayed that status, trailers-only, never executed again, and without
// grpc-retry-pushback-ms, as upstream-failed advises no retry time.
func TestGRPCAnswerCutShortUnderKeepIsReplayedAsAStatus(t *testing.T) {
	var calls atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/grpc+raw")
		w.Write([]byte{0, 0, 0, 0, 10, 'c', 'h', 'a'}) // a message of 10 bytes, 3 of them sent
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler) // the stream is reset: the rest never comes
	}))
	up.Config.Protocols = new(http.Protocols)
	up.Config.Protocols.SetUnencryptedHTTP2(true)
	up.Start()
	t.Cleanup(up.Close)
	e := newGRPCEnv(t, withPolicy(func(p *Policy) { p.OnUpstreamError = UpstreamErrorKeep }),
		func(o *Options) { o.Upstream = mustURL(t, up.URL) })
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	call := func() (*http.Response, error) {
		req, err := http.NewRequest(http.MethodPost, e.url+grpctest.Charge, bytes.NewReader([]byte{0, 0, 0, 0, 2, 'm', '1'}))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = http.Header{"Content-Type": {"application/grpc+raw"}, "Te": {"trailers"}, "Idempotency-Key": {"k"}}
		res, err := tr.RoundTrip(req)
		if err == nil {
			_, err = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		return res, err
	}
	if _, err := call(); err == nil {
		t.Fatal("call: the answer cut short reached the client whole")
	}
	if err := e.proxy.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err := call()
	if err != nil {
		t.Fatal(err)
	}
	if got, msg := res.Header.Get("Grpc-Status"), res.Header.Get("Grpc-Message"); got != "14" || !strings.HasPrefix(msg, problemjson.Base+"upstream-failed") {
		t.Fatalf("retry: grpc-status %q, message %q; want 14 (UNAVAILABLE) upstream-failed in a trailers-only answer", got, msg)
	}
	if got := res.Header.Get("Idempotent-Replayed"); got != "true" {
		t.Errorf("retry: Idempotent-Replayed %q, want true", got)
	}
	if got := res.Header.Values("Grpc-Retry-Pushback-Ms"); got != nil {
		t.Errorf("retry: grpc-retry-pushback-ms %q, want none", got)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the upstream was called %d times, want 1", n)
	}
}

func TestGRPCStreamingCallsPassThroughUnprotected(t *testing.T) {
	chat := func(e *grpcEnv, key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
		s, err := e.cc.NewStream(ctx, grpctest.ChatDesc, grpctest.Chat)
		if err != nil {
			return err
		}
		for _, m := range []string{"a", "b"} {
			b := []byte(m)
			if err := s.SendMsg(&b); err != nil {
				return err
			}
			var out []byte
			if err := s.RecvMsg(&out); err != nil {
				return err
			}
			if string(out) != "echo:"+m {
				return status.Errorf(codes.Internal, "got %q", out)
			}
		}
		s.CloseSend()
		var out []byte
		if err := s.RecvMsg(&out); err.Error() != "EOF" {
			return err
		}
		return nil
	}
	t.Run("keyed client stream sending two messages at once executes every time", func(t *testing.T) {
		e := newGRPCEnv(t)
		for range 2 {
			ctx := metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", "k")
			s, err := e.cc.NewStream(ctx, grpctest.ChatDesc, grpctest.Chat)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range []string{"a", "b"} {
				b := []byte(m)
				if err := s.SendMsg(&b); err != nil {
					t.Fatal(err)
				}
			}
			s.CloseSend()
			var got []string
			for {
				var out []byte
				if err := s.RecvMsg(&out); err != nil {
					break
				}
				got = append(got, string(out))
			}
			if strings.Join(got, ",") != "echo:a,echo:b" {
				t.Fatalf("stream answered %q, want both messages echoed", got)
			}
		}
		if n := e.ledger.Executions.Load(); n != 2 {
			t.Fatalf("stream ran %d times, want 2", n)
		}
	})
	t.Run("keyed bidirectional stream executes every time", func(t *testing.T) {
		e := newGRPCEnv(t)
		for range 2 {
			if err := chat(e, "k"); err != nil {
				t.Fatal(err)
			}
		}
		if n := e.ledger.Executions.Load(); n != 2 {
			t.Fatalf("stream ran %d times, want 2: a stream is never replayed", n)
		}
		if got := testutil.ToFloat64(e.proxy.metrics.requests.WithLabelValues(defaultRoute, string(OutcomePassthrough))); got != 2 {
			t.Errorf("requests_total{outcome=passthrough} = %v, want the 2 streams", got)
		}
		if got := testutil.ToFloat64(e.proxy.metrics.protocols.WithLabelValues(defaultRoute, "grpc")); got != 2 {
			t.Errorf("requests_by_protocol_total{protocol=grpc} = %v, want 2", got)
		}
	})
	t.Run("require_key refuses streams: UNIMPLEMENTED", func(t *testing.T) {
		e := newGRPCEnv(t, withPolicy(func(p *Policy) { p.RequireKey = true }))
		err := chat(e, "k")
		if s := status.Convert(err); s.Code() != codes.Unimplemented || !strings.HasPrefix(s.Message(), problemjson.Base+"streaming-call: ") {
			t.Fatalf("stream on a route requiring a key: %v, want UNIMPLEMENTED streaming-call", err)
		}
		if n := e.ledger.Executions.Load(); n != 0 {
			t.Fatalf("stream ran %d times, want 0", n)
		}
	})
	t.Run("server stream looks unary, and is released", func(t *testing.T) {
		e := newGRPCEnv(t)
		for range 2 {
			if got, err := e.watch(t, "w"); err != nil || strings.Join(got, ",") != "one,two" {
				t.Fatalf("stream gave %q, %v", got, err)
			}
		}
		if n := e.ledger.Executions.Load(); n != 2 {
			t.Fatalf("server stream ran %d times, want 2 (not replayed)", n)
		}
	})
}

// watch calls the server stream Watch with key, and returns the messages
// it gave and how it ended (nil for OK).
func (e *grpcEnv) watch(t *testing.T, key string) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
	s, err := e.cc.NewStream(ctx, grpctest.WatchDesc, grpctest.Watch)
	if err != nil {
		t.Fatal(err)
	}
	in := []byte("x")
	s.SendMsg(&in)
	s.CloseSend()
	var got []string
	for {
		var out []byte
		if err := s.RecvMsg(&out); err == io.EOF {
			return got, nil
		} else if err != nil {
			return got, err
		}
		got = append(got, string(out))
	}
}

// A server stream is told by its answer, more than one message, whether
// or not the answer fits in max_response_body: one too large to record is
// released as one that fits, and every call of it reaches the server, never
// a replay of a record without its messages.
func TestGRPCServerStreamOverTheRecordLimitIsNeverReplayed(t *testing.T) {
	e := newGRPCEnv(t, withPolicy(func(p *Policy) { p.MaxResponseBody = 1 })) // not a message of it
	for range 2 {
		if got, err := e.watch(t, "w"); err != nil || strings.Join(got, ",") != "one,two" {
			t.Fatalf("stream gave %q, %v; want one,two and OK", got, err)
		}
	}
	if n := e.ledger.Executions.Load(); n != 2 {
		t.Fatalf("server stream ran %d times, want 2 (not replayed)", n)
	}
	if got := testutil.ToFloat64(e.proxy.metrics.requests.WithLabelValues(defaultRoute, string(OutcomePassthrough))); got != 2 {
		t.Errorf("outcome passthrough counted %v times, want 2", got)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// A client's grpc-timeout is its wait: when it passes, the client gets
// DEADLINE_EXCEEDED (upstream-timeout) and the call goes on, without the
// client's deadline, to be recorded; the retry gets its answer.
func TestGRPCTimeoutIsTheClientsWait(t *testing.T) {
	e := newGRPCEnv(t)
	e.ledger.Committed, e.ledger.Release = make(chan struct{}, 1), make(chan struct{})
	var upstreamDeadline atomic.Bool
	e.ledger.Answer = func(ctx context.Context) error {
		_, has := ctx.Deadline()
		upstreamDeadline.Store(has)
		return nil
	}
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, e.url+grpctest.Charge, bytes.NewReader([]byte{0, 0, 0, 0, 2, 'm', '1'}))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = http.Header{"Content-Type": {"application/grpc+raw"}, "Te": {"trailers"}, "Idempotency-Key": {"k"}, "Grpc-Timeout": {"50m"}}
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if got := res.Header.Get("Grpc-Status"); got != "4" || !strings.HasPrefix(res.Header.Get("Grpc-Message"), problemjson.Base+"upstream-timeout") {
		t.Fatalf("after grpc-timeout: grpc-status %q, message %q; want 4 (DEADLINE_EXCEEDED) upstream-timeout", got, res.Header.Get("Grpc-Message"))
	}
	<-e.ledger.Committed
	close(e.ledger.Release)
	var out string
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		var err error
		out, _, _, err = e.charge(t, "k", "m1")
		return err
	})
	if out != "charged:m1" || e.ledger.Executions.Load() != 1 {
		t.Fatalf("retry got %q after %d executions, want the recorded answer of 1", out, e.ledger.Executions.Load())
	}
	if upstreamDeadline.Load() {
		t.Error("the upstream got the client's deadline: it would cut the call when the client gives up")
	}
}

// A route in shadow mode refuses no gRPC call either: a stream where a key
// is required and a message over max_request_body reach the upstream
// whole.
func TestGRPCShadowRouteRefusesNothing(t *testing.T) {
	e := newGRPCEnv(t, withPolicy(func(p *Policy) {
		p.Mode, p.RequireKey, p.MaxRequestBody = ModeShadow, true, 16
	}))
	if out, _, _, err := e.charge(t, "k", strings.Repeat("x", 40)); err != nil || out != "charged:"+strings.Repeat("x", 40) {
		t.Fatalf("a message over max_request_body: %q, %v; want it forwarded whole", out, err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", "s")
	s, err := e.cc.NewStream(ctx, grpctest.ChatDesc, grpctest.Chat)
	if err != nil {
		t.Fatal(err)
	}
	in, out := []byte("a"), []byte(nil)
	s.SendMsg(&in)
	if err := s.RecvMsg(&out); err != nil || string(out) != "echo:a" {
		t.Fatalf("a stream where a key is required: %q, %v; want it forwarded", out, err)
	}
	s.CloseSend()
	if n := e.ledger.Executions.Load(); n != 2 {
		t.Fatalf("%d executions, want 2", n)
	}
}

// An answer over max_response_body reaches the first caller whole and is
// recorded without its message: a retry is never executed again, and
// gets the status without the message, which grpc-go reports INTERNAL.
// An answer whose trailers take it over max_response_body and carry no
// grpc-status is recorded with no trailers at all: its replay is the empty
// body of length 0 that an omitted body is, with no trailer announced.
func TestGRPCAnswerWithoutAStatusOverTheLimitIsReplayedWithoutTrailers(t *testing.T) {
	var executions atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		executions.Add(1)
		w.Header().Set("Content-Type", grpcwire.ContentType)
		w.Header().Set("Trailer", "X-Audit")
		w.Write([]byte{0, 0, 0, 0, 2, 'o', 'k'})
		w.Header().Set("X-Audit", strings.Repeat("t", 512))
	}))
	up.Config.Protocols = new(http.Protocols)
	up.Config.Protocols.SetUnencryptedHTTP2(true)
	up.Start()
	t.Cleanup(up.Close)
	envOverH2C = true
	t.Cleanup(func() { envOverH2C = false })
	var kept map[string][]string
	st := keptAs{Store: newFlaky(t), keep: func(rec *store.Record) { kept = rec.Trailer }}
	e := newEnv(t, func(http.ResponseWriter, *http.Request) {}, withStore(st), withPolicy(func(p *Policy) { p.MaxResponseBody = 256 }), func(o *Options) {
		o.Upstream, o.UpstreamProtocol = mustURL(t, up.URL), UpstreamH2C
	})
	call := func() *http.Response {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/test.Ledger/Charge", bytes.NewReader([]byte{0, 0, 0, 0, 1, 'm'}))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", grpcwire.ContentType)
		req.Header.Set("Te", "trailers")
		req.Header.Set("Idempotency-Key", "k")
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, res.Body); err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		res.Body.Close()
		return res
	}
	call()
	res := call()
	if kept != nil { // written before the store answered the retry
		t.Fatalf("recorded trailers %q, want none: the answer had no grpc-status to keep", kept)
	}
	if res.Header.Get("Idempotent-Body-Omitted") != "true" || res.ContentLength != 0 || len(res.Trailer) != 0 {
		t.Fatalf("retry: omitted=%q length %d, trailer %v; want the replay of an omitted body, length 0, no trailers",
			res.Header.Get("Idempotent-Body-Omitted"), res.ContentLength, res.Trailer)
	}
	if n := executions.Load(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

func TestGRPCAnswerOverTheRecordLimitIsNotExecutedTwice(t *testing.T) {
	e := newGRPCEnv(t, withPolicy(func(p *Policy) { p.MaxResponseBody = 256 }))
	big := strings.Repeat("x", 1000)
	if out, _, _, err := e.charge(t, "k", big); err != nil || out != "charged:"+big {
		t.Fatalf("first call: %d bytes, %v; want the whole answer", len(out), err)
	}
	_, h, _, err := e.charge(t, "k", big)
	if status.Code(err) != codes.Internal || len(h["idempotent-body-omitted"]) != 1 {
		t.Fatalf("retry: %v, header %v; want INTERNAL, the replay without its message", err, h)
	}
	if n := e.ledger.Executions.Load(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

// An answer whose trailers take it over max_response_body is recorded
// without its message and trailers but with its grpc-status: a retry gets
// the call's status code, or INTERNAL from grpc-go for an OK without its
// message, never a status-less answer grpc-go reads as UNKNOWN.
func TestGRPCAnswerWhoseTrailersTakeItOverTheLimitKeepsItsStatus(t *testing.T) {
	for _, tt := range []struct {
		answer, want codes.Code
	}{{codes.OK, codes.Internal}, {codes.InvalidArgument, codes.InvalidArgument}} {
		t.Run(tt.answer.String(), func(t *testing.T) {
			e := newGRPCEnv(t, withPolicy(func(p *Policy) { p.MaxResponseBody = 256 }))
			e.ledger.Answer = func(ctx context.Context) error {
				grpc.SetTrailer(ctx, metadata.Pairs("x-audit", strings.Repeat("t", 512)))
				return status.Error(tt.answer, "declined")
			}
			if _, _, _, err := e.charge(t, "k", "m"); status.Code(err) != tt.answer {
				t.Fatalf("first call: %v, want %v", err, tt.answer)
			}
			// A trailers-only replay's header is what grpc-go calls its
			// trailer.
			_, h, tr, err := e.charge(t, "k", "m")
			if status.Code(err) != tt.want || len(h["idempotent-body-omitted"])+len(tr["idempotent-body-omitted"]) != 1 {
				t.Fatalf("retry: %v, header %v, trailer %v; want %v, the replay without its message", err, h, tr, tt.want)
			}
			if n := e.ledger.Executions.Load(); n != 1 {
				t.Fatalf("%d executions, want 1", n)
			}
		})
	}
}
