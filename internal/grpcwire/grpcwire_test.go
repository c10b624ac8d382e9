package grpcwire

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func TestIsGRPC(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/grpc":                  true,
		"application/grpc+proto":            true,
		"application/grpc+json":             true,
		"application/grpc; charset=utf-8":   true,
		"application/grpc-web":              false,
		"application/grpc-web+proto":        false,
		"application/grpcx":                 false,
		"application/json":                  false,
		"":                                  false,
		"application/grpc;;":                false,
		"application/grpc ; q=1":            true,
		"application/grpc-web-text+proto ;": false,
	} {
		if got := IsGRPC(ct); got != want {
			t.Errorf("IsGRPC(%q) = %v, want %v", ct, got, want)
		}
	}
}

// rawCodec sends and receives messages as they are, so the tests need no
// generated code.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "raw" }

// h2cServer serves handler over HTTP/2 without TLS, as the proxy's
// listener does, and returns a gRPC client connected to it.
func h2cServer(t *testing.T, handler http.HandlerFunc) *grpc.ClientConn {
	t.Helper()
	srv := httptest.NewUnstartedServer(handler)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	cc, err := grpc.NewClient(strings.TrimPrefix(srv.URL, "http://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// seen is what the handler made of a call's request.
type seen struct {
	first First
	err   error
	all   []byte // the whole body, read through First.Body, for calls that end
}

// TestReadFirstTellsUnaryFromStreams runs each kind of call from grpc-go
// through ReadFirst. A unary call's request ends with its message; a
// client stream that sends more, or waits, does not; a server-streaming
// call's request looks like a unary one (its answer tells, Messages).
func TestReadFirstTellsUnaryFromStreams(t *testing.T) {
	msg1, msg2 := []byte("first message"), []byte("second")
	framed := func(ms ...[]byte) []byte {
		var b []byte
		for _, m := range ms {
			b = append(b, 0)
			b = binary.BigEndian.AppendUint32(b, uint32(len(m)))
			b = append(b, m...)
		}
		return b
	}
	tests := []struct {
		name      string
		desc      grpc.StreamDesc
		send      [][]byte
		closeSend bool
		wantUnary bool
		wantAll   []byte // nil: the body is not read to its end
	}{
		{"unary", grpc.StreamDesc{}, [][]byte{msg1}, true, true, framed(msg1)},
		{"server streaming", grpc.StreamDesc{ServerStreams: true}, [][]byte{msg1}, true, true, framed(msg1)},
		{"client streaming, two messages", grpc.StreamDesc{ClientStreams: true}, [][]byte{msg1, msg2}, true, false, framed(msg1, msg2)},
		{"bidirectional, waiting for an answer", grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, [][]byte{msg1}, false, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := make(chan seen, 1)
			cc := h2cServer(t, func(w http.ResponseWriter, r *http.Request) {
				var s seen
				s.first, s.err = ReadFirst(r.Body, 1<<20, 200*time.Millisecond)
				if s.err == nil && (s.first.Unary || tt.wantAll != nil) {
					s.all, s.err = io.ReadAll(s.first.Body)
				}
				got <- s
				WriteStatus(w, Unimplemented, "decided", 0)
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stream, err := cc.NewStream(ctx, &tt.desc, "/test.Service/Method")
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tt.send {
				if err := stream.SendMsg(&m); err != nil {
					t.Fatalf("SendMsg: %v", err)
				}
			}
			if tt.closeSend {
				stream.CloseSend()
			}
			var s seen
			select {
			case s = <-got:
			case <-ctx.Done():
				t.Fatal("the handler never decided")
			}
			if s.err != nil {
				t.Fatalf("ReadFirst: %v", s.err)
			}
			if s.first.Unary != tt.wantUnary || !bytes.Equal(s.first.Message, framed(msg1)) {
				t.Errorf("Unary %v, Message %q; want %v and %q", s.first.Unary, s.first.Message, tt.wantUnary, framed(msg1))
			}
			if tt.wantAll != nil && !bytes.Equal(s.all, tt.wantAll) {
				t.Errorf("Body read %q, want the whole request %q", s.all, tt.wantAll)
			}
			var reply []byte
			if err := stream.RecvMsg(&reply); status.Code(err) != codes.Unimplemented {
				t.Errorf("RecvMsg = %v, want the handler's Unimplemented", err)
			}
		})
	}
}

func TestReadFirstRefusesWhatIsNotOneMessage(t *testing.T) {
	tests := map[string]struct {
		body  []byte
		limit int64
		want  error
	}{
		"empty":             {nil, 100, ErrMalformed},
		"short prefix":      {[]byte{0, 0, 0}, 100, ErrMalformed},
		"short message":     {[]byte{0, 0, 0, 0, 9, 'x'}, 100, ErrMalformed},
		"over the limit":    {[]byte{0, 0, 0, 0, 96}, 100, ErrTooLarge},
		"huge length field": {[]byte{0, 0xff, 0xff, 0xff, 0xff}, 100, ErrTooLarge},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ReadFirst(io.NopCloser(bytes.NewReader(tt.body)), tt.limit, time.Second)
			if err != tt.want {
				t.Fatalf("ReadFirst = %v, want %v", err, tt.want)
			}
		})
	}
	first, err := ReadFirst(io.NopCloser(bytes.NewReader([]byte{0, 0, 0, 0, 95})), 100, time.Second)
	if err != ErrMalformed {
		t.Fatalf("a message of exactly the limit with its prefix, cut: %+v, %v; want ErrMalformed", first, err)
	}
}

// The proxy's refusals are statuses a gRPC client reads: code, message
// (percent-encoded on the wire) and the pushback its retry policy obeys.
func TestWriteStatusIsAStatusToAGRPCClient(t *testing.T) {
	const msg = "https://idempotency-proxy.dev/problems/in-flight: 100% busy\nretry"
	cc := h2cServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		WriteStatus(w, Aborted, msg, 1500)
	})
	in := []byte("x")
	var out []byte
	err := cc.Invoke(context.Background(), "/test.Service/Method", &in, &out)
	st := status.Convert(err)
	if st.Code() != codes.Aborted || st.Message() != msg {
		t.Fatalf("client got %v %q, want Aborted %q", st.Code(), st.Message(), msg)
	}

	// On the wire: a trailers-only answer, HTTP 200.
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteStatus(w, Aborted, msg, 1500)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr}).Post(srv.URL+"/test.Service/Method", ContentType, bytes.NewReader([]byte{0, 0, 0, 0, 0}))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	h := res.Header
	if res.StatusCode != 200 || len(body) != 0 || h.Get("Content-Type") != ContentType || h.Get(StatusField) != "10" ||
		h.Get(PushbackField) != "1500" || h.Get(MessageField) != "https://idempotency-proxy.dev/problems/in-flight: 100%25 busy%0Aretry" {
		t.Fatalf("answer %d %q, header %v; want 200, no body, a trailers-only status", res.StatusCode, body, h)
	}
}

func TestStatusReadsTrailersThenTrailersOnlyHeader(t *testing.T) {
	tests := []struct {
		name            string
		header, trailer http.Header
		want            Code
		ok              bool
	}{
		{"trailer", http.Header{}, http.Header{StatusField: {"14"}}, Unavailable, true},
		{"trailers-only", http.Header{StatusField: {"10"}}, nil, Aborted, true},
		{"trailer wins", http.Header{StatusField: {"10"}}, http.Header{StatusField: {"0"}}, OK, true},
		{"none", http.Header{}, http.Header{}, 0, false},
		{"not a number", nil, http.Header{StatusField: {"OK"}}, 0, false},
		{"two values", nil, http.Header{StatusField: {"0", "1"}}, 0, false},
	}
	for _, tt := range tests {
		if got, ok := Status(tt.header, tt.trailer); got != tt.want || ok != tt.ok {
			t.Errorf("%s: Status = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

// A Counter counts the messages begun in a body, however its writes cut
// it: in prefixes, in lengths, in messages.
func TestCounterCountsMessagesWhateverTheWrites(t *testing.T) {
	tests := []struct {
		b    []byte
		n    int
		name string
	}{
		{nil, 0, "empty"},
		{[]byte{0, 0, 0, 0, 0}, 1, "one empty message"},
		{[]byte{0, 0, 0, 0, 1, 'a', 1, 0, 0, 0, 0}, 2, "two"},
		{[]byte{0, 0, 0, 0, 2, 'a'}, 1, "cut"},
		{[]byte{0, 0, 0, 0, 0, 0}, 1, "a prefix begun"},
		{[]byte{0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0}, 1, "a message as long as a prefix says"},
	}
	for _, tt := range tests {
		for i := range len(tt.b) + 1 {
			var c Counter
			c.Write(tt.b[:i])
			c.Write(tt.b[i:])
			if got := c.Messages(); got != tt.n {
				t.Errorf("%s, written at %d: Messages = %d, want %d", tt.name, i, got, tt.n)
			}
		}
		var c Counter
		for i := range tt.b {
			c.Write(tt.b[i : i+1])
		}
		if got := c.Messages(); got != tt.n {
			t.Errorf("%s, written a byte at a time: Messages = %d, want %d", tt.name, got, tt.n)
		}
	}
}

func TestTimeout(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"1S": time.Second, "250m": 250 * time.Millisecond, "2H": 2 * time.Hour, "3M": 3 * time.Minute,
		"7u": 7 * time.Microsecond, "99999999n": 99999999, "": -1, "S": -1, "1s": -1, "123456789S": -1, "-1S": -1,
	} {
		got, ok := Timeout(v)
		if want < 0 && ok || want >= 0 && (!ok || got != want) {
			t.Errorf("Timeout(%q) = %v, %v; want %v", v, got, ok, want)
		}
	}
}

// A timeout longer than a time.Duration holds (about 292 years) is the
// longest one, as grpc-go reads it: never a product that wraps around to
// a short or negative wait.
func TestTimeoutTooLongForADurationIsTheLongest(t *testing.T) {
	for _, v := range []string{"5124096H", "99999999H", "2562048H"} {
		if got, ok := Timeout(v); !ok || got != math.MaxInt64 {
			t.Errorf("Timeout(%q) = %v, %v; want the longest duration", v, got, ok)
		}
	}
	if got, ok := Timeout("2562047H"); !ok || got != 2562047*time.Hour {
		t.Errorf("Timeout(2562047H) = %v, %v; want 2562047h", got, ok)
	}
}

func TestCodeWords(t *testing.T) {
	var c Code
	if err := c.UnmarshalText([]byte("resource_exhausted")); err != nil || c != ResourceExhausted {
		t.Fatalf("resource_exhausted = %v, %v", c, err)
	}
	if err := c.UnmarshalText([]byte("UNAVAILIBLE")); err == nil || !strings.Contains(err.Error(), "did you mean UNAVAILABLE") {
		t.Fatalf("a misspelt code: %v", err)
	}
	for i := range Unauthenticated + 1 {
		var c codes.Code
		if err := c.UnmarshalJSON([]byte(`"` + i.String() + `"`)); err != nil || uint32(c) != uint32(i) {
			t.Errorf("code %d is %s here and %v (%v) to grpc-go", i, i, c, err)
		}
	}
}

func FuzzCounter(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 'a', 1, 0, 0, 0, 0}, uint8(3))
	f.Fuzz(func(t *testing.T, b []byte, at uint8) {
		var whole, cut Counter
		whole.Write(b)
		i := min(int(at), len(b))
		cut.Write(b[:i])
		cut.Write(b[i:])
		if whole.Messages() != cut.Messages() {
			t.Fatalf("%x: %d messages whole, %d written at %d", b, whole.Messages(), cut.Messages(), i)
		}
	})
}
