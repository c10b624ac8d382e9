package postgres

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Inspect returns the lease or record under key, or store.ErrNotFound.
func (s *Store) Inspect(ctx context.Context, key string) (store.Entry, error) {
	ctx, cancel, err := s.op(ctx, "inspect")
	if err != nil {
		return store.Entry{}, err
	}
	defer cancel()
	var fp, head, body, desc []byte
	var expires time.Time
	err = s.pool.QueryRow(ctx, s.sql.inspect, key).Scan(&fp, &expires, &head, &body, &desc)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Entry{}, fmt.Errorf("postgres inspect: %w", store.ErrNotFound)
	}
	if err != nil {
		return store.Entry{}, s.translate("inspect", err)
	}
	return entry(key, fp, expires, head, body, len(body), desc)
}

// Delete removes the lease or record under key, or returns
// store.ErrNotFound. The owner of a deleted lease then gets
// store.ErrLockLost from Extend and Complete: its token is gone with the row.
//
// A record's deletion is logged in the same transaction, and Delete
// returns once every replica whose cache may hold it dropped it, or its
// cache's lease ended (replica.go): about a read of the deletions, at
// most the lease. Should that wait end first (ctx, the database), the
// record is deleted and the error, wrapping store.ErrUnavailable, says
// that caches may replay it until their leases end.
func (s *Store) Delete(ctx context.Context, key string) error {
	octx, cancel, err := s.op(ctx, "delete")
	if err != nil {
		return err
	}
	seq, found, err := s.deleteLogged(octx, key)
	cancel()
	if err != nil {
		return s.translate("delete", err)
	}
	if !found {
		return fmt.Errorf("postgres delete: %w", store.ErrNotFound)
	}
	if seq == 0 {
		return nil // a lease, which no cache holds
	}
	if s.cache != nil {
		s.cache.invalidate(key)
	}
	return s.awaitAcks(ctx, seq)
}

// List returns up to limit entries in state (0 for all) in key order after
// cursor ("" to start), and the cursor of the next page ("" when done).
// Each page is one indexed statement, and the cursor is the last key of the
// page, so a key present for the whole listing is returned exactly once and
// a cursor stays valid on every replica. Listed records carry no Body; a
// row that does not decode is listed as store.UnreadableEntry. A page
// reads at most listBytes of heads (and one at least), ending early with a
// cursor.
func (s *Store) List(ctx context.Context, state store.State, cursor string, limit int) ([]store.Entry, string, error) {
	if limit <= 0 {
		return nil, "", errors.New("postgres list: limit must be positive")
	}
	after, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return nil, "", fmt.Errorf("postgres list: malformed cursor %q", cursor)
	}
	filter := 0
	switch state {
	case store.InFlight:
		filter = 1
	case store.Completed:
		filter = 2
	}
	ctx, cancel, err := s.op(ctx, "list")
	if err != nil {
		return nil, "", err
	}
	defer cancel()
	rows, err := s.pool.Query(ctx, s.sql.list, string(after), filter, limit, listBytes)
	if err != nil {
		return nil, "", s.translate("list", err)
	}
	var out []store.Entry
	var key string
	var fp, head, desc []byte
	var expires time.Time
	var bodyBytes int32
	var fits, cut bool
	_, err = pgx.ForEachRow(rows, []any{&key, &fp, &expires, &head, &bodyBytes, &desc, &fits}, func() error {
		if cut = cut || !fits; cut {
			return nil // past what the page may read
		}
		e, err := entry(key, fp, expires, head, nil, int(bodyBytes), desc)
		if errors.Is(err, store.ErrUnreadable) {
			e = store.UnreadableEntry(key, head == nil, expires.UTC(), err)
		} else if err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, "", s.translate("list", err)
	}
	next := ""
	if len(out) == limit || cut {
		next = base64.RawURLEncoding.EncodeToString([]byte(out[len(out)-1].Key))
	}
	return out, next, nil
}

// listBytes is how many bytes of heads one page of a listing reads at
// most: a sealed record's head holds its sealed header and body, so a page
// of limit records of max_response_body each would otherwise hold them all
// at once.
var listBytes = 16 << 20

// entry describes a row: a lease with its description desc when head is
// NULL, else a record.
func entry(key string, fp []byte, expires time.Time, head, body []byte, bodyBytes int, desc []byte) (store.Entry, error) {
	e := store.Entry{Key: key, State: store.InFlight, ExpiresAt: expires.UTC()}
	if err := setFingerprint(&e.Fingerprint, fp); err != nil {
		return store.Entry{}, err
	}
	if head == nil {
		var err error
		if e.Lease, err = decodeLease(desc, e.Fingerprint); err != nil {
			return store.Entry{}, err
		}
		return e, nil
	}
	rec, err := decode(head, body)
	if err != nil {
		return store.Entry{}, err
	}
	e.State, e.Record, e.BodyBytes = store.Completed, rec, bodyBytes
	switch {
	case rec.Sealed != nil:
		e.BodyBytes = rec.BodyBytes() // the size in clear
	case rec.BodyOmitted:
		e.BodyBytes = 0
	}
	return e, nil
}
