package postgres

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestListRefusesALimitThatIsNotPositive: a page of no entries is a
// caller's mistake, refused before the database is asked anything, not a
// listing of every key (nor an unavailable store).
func TestListRefusesALimitThatIsNotPositive(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // no database: the limit is refused without one
	s, err := New(Options{URL: fmt.Sprintf("postgres://u@127.0.0.1:%d/db?connect_timeout=5", port), Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, limit := range []int{0, -1} {
		_, _, err := s.List(context.Background(), 0, "", limit)
		if err == nil || errors.Is(err, store.ErrUnavailable) {
			t.Errorf("List with limit %d = %v, want the limit refused", limit, err)
		}
	}
}

// TestATimeoutLeftUnsetIsTheDefault: Options.Timeout of 0 means the
// default bound on each operation, not a bound of nothing; a timeout that
// is set is kept.
func TestATimeoutLeftUnsetIsTheDefault(t *testing.T) {
	for _, tt := range []struct{ set, want time.Duration }{{0, DefaultTimeout}, {-time.Second, DefaultTimeout}, {3 * time.Second, 3 * time.Second}} {
		s, err := New(Options{URL: "postgres://u@127.0.0.1:1/db", Timeout: tt.set, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		if s.timeout != tt.want {
			t.Errorf("Timeout %s: each operation bounded by %s, want %s", tt.set, s.timeout, tt.want)
		}
		s.Close()
	}
}

// TestBothSchemesOfAPostgresURLAreTaken: postgres:// and postgresql://
// both name a PostgreSQL server; any other scheme is refused by name.
func TestBothSchemesOfAPostgresURLAreTaken(t *testing.T) {
	for _, scheme := range []string{"postgres", "postgresql"} {
		s, err := New(Options{URL: scheme + "://u@127.0.0.1:1/db", SweepInterval: -1})
		if err != nil {
			t.Errorf("a %s:// URL: %v", scheme, err)
			continue
		}
		s.Close()
	}
	if _, err := New(Options{URL: "mysql://u@127.0.0.1:1/db", SweepInterval: -1}); err == nil || !strings.Contains(err.Error(), `not "mysql"`) {
		t.Errorf("a mysql:// URL: %v, want the scheme refused by name", err)
	}
}

// TestATokenIs128RandomBits: a lease's token is 128 random bits in 32 hex
// digits, as every store's is.
func TestATokenIs128RandomBits(t *testing.T) {
	a, b := newToken(), newToken()
	if raw, err := hex.DecodeString(a); err != nil || len(raw) != 16 {
		t.Errorf("token %q: %d bytes, %v; want 16 random bytes in hex", a, len(raw), err)
	}
	if a == b {
		t.Errorf("two tokens are the same: %q", a)
	}
}
