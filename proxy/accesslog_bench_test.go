package proxy

import (
	"io"
	"log/slog"
	"net/http"
	"testing"
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
