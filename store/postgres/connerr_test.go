package postgres

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestARefusedConnectionIsSaidOnce: a connection refused on both of
// sslmode=prefer's attempts is said once, on one line, and still says
// where and why.
func TestARefusedConnectionIsSaidOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // nothing listens there now
	_, err = pgconn.Connect(context.Background(), fmt.Sprintf("postgres://u@127.0.0.1:%d/db?connect_timeout=5", port))
	if err == nil {
		t.Fatal("connected to a closed port")
	}
	if n := strings.Count(err.Error(), "connection refused"); n < 2 {
		t.Fatalf("pgx says the refusal %d times, where sslmode=prefer's two attempts said it twice: %v", n, err)
	}
	msg := sayAttemptsOnce(err).Error()
	if n := strings.Count(msg, "connection refused"); n != 1 || strings.Contains(msg, "\n") {
		t.Errorf("the refusal is said %d times, on more than one line: %q", n, msg)
	}
	if !strings.Contains(msg, fmt.Sprint(port)) {
		t.Errorf("%q does not say where", msg)
	}
}
