package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// testMigrationRefusedIsNotDone: a migration the database refuses for
// another reason than the role's rights (here a server that only reads, as
// a standby does) is reported as the migration's failure, not taken for
// done.
func testMigrationRefusedIsNotDone(t *testing.T, srv *pgtest.Server) {
	ctx := context.Background()
	if _, err := srv.Conn(t).Exec(ctx, fmt.Sprintf(earlierTable, "read_only")); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{URL: srv.URL() + "&default_transaction_read_only=on", Table: "read_only", Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Prepare(ctx)
	if !errors.Is(err, store.ErrRefused) || !strings.Contains(err.Error(), "add column lease to read_only") {
		t.Fatalf("Prepare on a server that only reads = %v, want the migration refused", err)
	}
}
