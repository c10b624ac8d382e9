package postgres

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// connectError is pgx's failure to connect with each distinct attempt said
// once. Without sslmode in the URL, pgx uses sslmode=prefer: it dials with
// TLS, then again without, and a refused connection fails both the same
// way, which pgx's message would print twice.
type connectError struct{ err *pgconn.ConnectError }

func (e connectError) Error() string {
	lines := strings.Split(e.err.Error(), "\n\t")
	kept := lines[:1]
	for _, l := range lines[1:] {
		if l != kept[len(kept)-1] {
			kept = append(kept, l)
		}
	}
	if len(kept) == 2 {
		return kept[0] + " " + kept[1]
	}
	return strings.Join(kept, "\n\t")
}

func (e connectError) Unwrap() error { return e.err }

// sayAttemptsOnce rewrites a connection failure as connectError; any other
// error is returned as it is.
func sayAttemptsOnce(err error) error {
	var ce *pgconn.ConnectError
	// Only when nothing wraps it: an outer message would be lost.
	if errors.As(err, &ce) && ce.Config != nil && ce.Error() == err.Error() {
		return connectError{ce}
	}
	return err
}
