package main

import (
	"bytes"
	"encoding/json"
	stdlog "log"
	"log/slog"
	"os"
	"strings"
	"testing"
)

// Lines net/http writes through the standard log package or a server's
// ErrorLog come out as JSON warnings like every other line.
func TestStandardLogAndServerErrorsAreJSONWarnings(t *testing.T) {
	prev := slog.Default()
	t.Cleanup(func() {
		slog.SetDefault(prev)
		stdlog.SetOutput(os.Stderr)
		stdlog.SetFlags(stdlog.LstdFlags)
	})
	var buf bytes.Buffer
	level := new(slog.LevelVar)
	log := newLogger(&buf, level)

	stdlog.Printf("Unsolicited response received on idle HTTP channel starting with %q; err=%v", "HTTP/1.1 200 OK", nil)
	serverErrorLog(log).Printf("http: TLS handshake error from %s: EOF", "127.0.0.1:5555")
	level.Set(slog.LevelError) // log_level: error hides them, as any warning
	stdlog.Print("hidden")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), buf.String())
	}
	for i, want := range []string{"Unsolicited response", "http: TLS handshake error"} {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(lines[i]), &rec); err != nil {
			t.Fatalf("line %d is not JSON: %q", i+1, lines[i])
		}
		if rec.Level != "WARN" || !strings.HasPrefix(rec.Msg, want) {
			t.Errorf("line %d = %+v, want a WARN starting %q", i+1, rec, want)
		}
	}
}

// What the OpenTelemetry SDK has to say — here, an endpoint it cannot
// parse — is a JSON line like every other, not a plain one from its own
// logger.
func TestTracingSetupProblemsAreJSONLogLines(t *testing.T) {
	up, _ := countingUpstream(t)
	p := start(t, []string{"IDEMPOTENCY_PROXY_TRACING_ENABLED=true", "OTEL_EXPORTER_OTLP_ENDPOINT=::not a url"}, "--upstream", up.URL)
	waitFor(t, "the SDK's complaint", func() bool { return strings.Contains(p.logs.String(), "parse url") })
	for _, line := range strings.Split(strings.TrimSpace(p.logs.String()), "\n") {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Level == "" {
			t.Errorf("stderr line is not a JSON log line: %q", line)
		}
	}
}
