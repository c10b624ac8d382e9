package proxy

import (
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"
)

// BenchmarkHandlerNoKeyAccessLog is BenchmarkHandlerNoKey with the access
// log on, written as the binary writes it (JSON lines at info level): what
// one access line costs a request.
func BenchmarkHandlerNoKeyAccessLog(b *testing.B) {
	rig := newBenchRig(b, withAccessLog, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
		o.AccessLogOutput = io.Discard
	})
	delete(rig.r.Header, "Idempotency-Key")
	b.ReportAllocs()
	for b.Loop() {
		if got := rig.serve(""); got != http.StatusOK {
			b.Fatalf("status %d, want 200", got)
		}
	}
}

// BenchmarkAccessLine formats one line with the default fields and with
// every field, X-Forwarded-For read through two trusted hops: what
// choosing more fields costs a line.
func BenchmarkAccessLine(b *testing.B) {
	q := accessRequest("POST", "/v1/charges", "POST /v1/charges", "3f2a1b9c0d4e5f60718293a4b5c6d7e8", 199)
	q.in.RemoteAddr = "10.0.0.1:50123"
	q.in.Header["User-Agent"] = []string{"curl/8.5.0"}
	q.in.Header["X-Request-Id"] = []string{"f81d4fae-7dec-11d0-a765-00a0c91e6bf6"}
	q.in.Header["X-Forwarded-For"] = []string{"203.0.113.9, 10.0.0.2"}
	q.upstreamTook.Store(1234567)
	now := time.Now()
	for i, name := range []string{"default", "every"} {
		f := formats(b)[i] // the default fields, then every field
		b.Run(name, func(b *testing.B) {
			buf := make([]byte, 0, 512)
			b.ReportAllocs()
			for b.Loop() {
				buf = appendAccessLine(buf[:0], f, now, q, OutcomeReplayed, 201, 1234567)
			}
		})
	}
}
