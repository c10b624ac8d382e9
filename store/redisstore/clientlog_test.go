package redisstore

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/lograte"
)

// go-redis logs a line on every command that cannot dial while Redis is
// down: the process's log gets one a period, the next one counting those
// left out.
func TestClientLogLinesComeOnceAPeriodWhileRedisIsDown(t *testing.T) {
	var buf bytes.Buffer
	l := newClientLogger(slog.New(slog.NewJSONHandler(&buf, nil)))
	now := time.Unix(1_700_000_000, 0)
	l.now = func() time.Time { return now }
	for range 50 {
		l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts", 5)
	}
	if got := strings.Count(buf.String(), `"msg":"redis client"`); got != 1 {
		t.Fatalf("%d redis client lines for 50 in one period, want 1:\n%s", got, buf.String())
	}
	now = now.Add(lograte.Period)
	l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts", 5)
	if !strings.Contains(buf.String(), `"suppressed":49`) {
		t.Errorf("the line after the period does not count the 49 left out:\n%s", buf.String())
	}
}
