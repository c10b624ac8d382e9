package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

var _ store.Store = (*Store)(nil)

// op starts one operation under the store's timeout once the table is
// ready. A table that cannot be used (of another shape) is unavailable to
// the request: on_store_error applies, and readiness says why.
func (s *Store) op(ctx context.Context, name string) (context.Context, context.CancelFunc, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	if err := s.ready(ctx); err != nil {
		cancel()
		if !errors.Is(err, store.ErrUnavailable) {
			err = fmt.Errorf("postgres %s: %w: %w", name, store.ErrUnavailable, err)
		}
		return nil, nil, err
	}
	return ctx, cancel, nil
}

// Begin takes a lease on key, described by l, or reports what is there, in
// one statement.
//
// A completed record the cache holds (cache.go) is answered from there;
// one the statement finds is added to it.
func (s *Store) Begin(ctx context.Context, key string, l store.Lease, ttl time.Duration) (store.BeginResult, error) {
	if s.cache != nil {
		if e, ok := s.cache.get(key, time.Now()); ok {
			return e.result()
		}
	}
	ctx, cancel, err := s.op(ctx, "begin")
	if err != nil {
		return store.BeginResult{}, err
	}
	defer cancel()
	var version uint64
	var fillable bool
	if s.cache != nil {
		version, fillable = s.cache.readVersion()
	}
	sent := time.Now()
	c := s.beginCall(key, l, ttl)
	err = s.batch.do(ctx, c)
	if errors.Is(err, pgx.ErrNoRows) {
		// The statement always returns the row it found or made; a second
		// try, alone, covers what no interleaving should produce.
		err = c.begun.scan(s.pool.QueryRow(ctx, s.sql.begin, c.args...))
	}
	if err != nil {
		return store.BeginResult{}, s.translate("begin", err)
	}
	res, err := c.beginResult(l.Fingerprint)
	if err == nil && res.State == store.Completed && fillable {
		s.cache.fill(key, c.begun.cached(sent), version)
	}
	return res, err
}

// cached is r, a completed record read by a statement sent at sent, as
// the cache keeps it: until sent plus its time left by the database's
// clock, less cacheExpiryMargin, and at most cacheMaxAge.
func (r *beginRow) cached(sent time.Time) cached {
	left := min(time.Duration(r.left)*time.Millisecond-cacheExpiryMargin, cacheMaxAge)
	return cached{fingerprint: r.fingerprint, head: r.head, body: r.body, expires: sent.Add(left)}
}

// result is the answer of Begin on e's key.
func (e *cached) result() (store.BeginResult, error) {
	res := store.BeginResult{State: store.Completed}
	if err := setFingerprint(&res.Fingerprint, e.fingerprint); err != nil {
		return store.BeginResult{}, err
	}
	rec, err := decode(e.head, e.body)
	if err != nil {
		return store.BeginResult{}, err
	}
	res.Record = rec
	return res, nil
}

// beginCall is Begin's statement for key, with a new token.
func (s *Store) beginCall(key string, l store.Lease, ttl time.Duration) *call {
	var desc []byte
	if n := store.EncodedLeaseSize(&l); n > 0 {
		desc = store.AppendLease(make([]byte, 0, n), &l)
	}
	return &call{kind: callBegin, key: key, args: []any{key, newToken(), l.Fingerprint[:], ttl.Milliseconds(), desc}}
}

// beginResult reads the answer of c, a begin statement for a lease on fp.
func (c *call) beginResult(fp store.Fingerprint) (store.BeginResult, error) {
	token := c.args[1].(string)
	owner, gotFP, head, body, gotDesc := c.begun.owner, c.begun.fingerprint, c.begun.head, c.begun.body, c.begun.lease
	if owner == token {
		return store.BeginResult{State: store.Acquired, Token: token, Fingerprint: fp}, nil
	}
	res := store.BeginResult{State: store.InFlight}
	if err := setFingerprint(&res.Fingerprint, gotFP); err != nil {
		return store.BeginResult{}, err
	}
	if head == nil {
		var err error
		if res.Lease, err = decodeLease(gotDesc, res.Fingerprint); err != nil {
			return store.BeginResult{}, err
		}
		return res, nil
	}
	rec, err := decode(head, body)
	if err != nil {
		return store.BeginResult{}, err
	}
	res.State, res.Record = store.Completed, rec
	return res, nil
}

// Extend renews the lease while token owns it.
func (s *Store) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	ctx, cancel, err := s.op(ctx, "extend")
	if err != nil {
		return err
	}
	defer cancel()
	c := &call{kind: callExtend, key: key, args: []any{key, token, lease.Milliseconds()}}
	if err := s.batch.do(ctx, c); err != nil {
		return s.translate("extend", err)
	}
	if c.tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres extend: %w", store.ErrLockLost)
	}
	return nil
}

// Complete stores rec under key for ttl while token owns the lease. The
// same record completed again with the same token succeeds.
func (s *Store) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	ctx, cancel, err := s.op(ctx, "complete")
	if err != nil {
		return err
	}
	defer cancel()
	c := completeCall(key, token, rec, ttl)
	if err := s.batch.do(ctx, c); err != nil {
		return s.translate("complete", err)
	}
	if c.tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres complete: %w", store.ErrLockLost)
	}
	return nil
}

// Release drops the lease if token still owns it; otherwise it does nothing.
func (s *Store) Release(ctx context.Context, key, token string) error {
	ctx, cancel, err := s.op(ctx, "release")
	if err != nil {
		return err
	}
	defer cancel()
	c := &call{kind: callRelease, key: key, args: []any{key, token}}
	return s.translate("release", s.batch.do(ctx, c))
}

// completeCall is Complete's statement.
func completeCall(key, token string, rec *store.Record, ttl time.Duration) *call {
	head, body := encode(rec)
	return &call{kind: callComplete, key: key, args: []any{key, token, head, body, ttl.Milliseconds()}}
}

// encode splits rec into its head (the encoding without the body) and its
// body, never NULL, so that a retried completion compares equal.
func encode(rec *store.Record) (head, body []byte) {
	h := *rec
	h.Body = nil
	head = store.AppendRecord(nil, &h)
	body = rec.Body
	if body == nil {
		body = []byte{}
	}
	return head, body
}

func decode(head, body []byte) (*store.Record, error) {
	rec, err := store.DecodeRecord(head)
	if err != nil {
		return nil, fmt.Errorf("postgres record: %w", err)
	}
	if !rec.BodyOmitted && len(body) > 0 {
		rec.Body = body
	}
	return rec, nil
}

func decodeLease(desc []byte, fp store.Fingerprint) (store.Lease, error) {
	l, err := store.DecodeLease(desc, fp)
	if err != nil {
		return store.Lease{}, fmt.Errorf("postgres lease: %w", err)
	}
	return l, nil
}

func setFingerprint(dst *store.Fingerprint, b []byte) error {
	if len(b) != len(dst) {
		return fmt.Errorf("postgres: fingerprint of %d bytes: %w", len(b), store.ErrCorrupt)
	}
	copy(dst[:], b)
	return nil
}
