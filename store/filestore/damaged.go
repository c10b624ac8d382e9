package filestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	bolt "go.etcd.io/bbolt"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// A database file whose pages contradict each other makes bbolt panic
// where it reads them: a power loss under fsync: false leaves one, since
// the operating system writes a commit's pages in any order (the meta page
// that names the new pages may reach the disk before they do), and so does
// a disk that damaged them. The store turns that panic into an error. At
// Open it names the file and what an operator can do; afterwards the
// operation that met it fails with store.ErrCorrupt — the key it read may
// hold a record, which the proxy never executes again — and Ping reports
// the damage, so that readiness says why.

// damagedError is bbolt's panic over a damaged file; it wraps
// store.ErrCorrupt.
type damagedError struct {
	file   string
	reason any // what bbolt panicked with
}

func (e *damagedError) Error() string {
	return fmt.Sprintf("%s is damaged (%v): %v", e.file, e.reason, store.ErrCorrupt)
}

func (e *damagedError) Unwrap() error { return store.ErrCorrupt }

// safely runs fn, one call into bbolt, and returns a panic of bbolt's as a
// damagedError, remembered for Ping. bbolt rolls back the transaction a
// panic leaves (DB.View, DB.Update), so the store goes on serving what it
// can read.
func (s *Store) safely(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			d := &damagedError{file: filepath.Join(s.dir, dataFile), reason: p}
			s.damaged.CompareAndSwap(nil, d)
			err = d
		}
	}()
	return fn()
}

// openDB opens the database file at path with o; a file that bbolt
// panics over while opening it is an error that says what to do. bbolt's
// lock on the file is then dropped and its descriptor closed; its memory
// map, which bbolt alone could unmap, stays until the process ends (the
// proxy stops on this error). The map holds the open file on its own, so
// closing the descriptor alone would keep the lock.
func openDB(path string, o *bolt.Options) (db *bolt.DB, err error) {
	var f *os.File
	o.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		var err error
		f, err = os.OpenFile(name, flag, perm)
		return f, err
	}
	defer func() {
		if p := recover(); p != nil {
			if f != nil {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}
			db, err = nil, fmt.Errorf("%w: restore the directory from a copy, or move %s aside to start empty (the keys it held then execute again)",
				&damagedError{file: path, reason: p}, dataFile)
		}
	}()
	return bolt.Open(path, 0o600, o)
}

// damage is the damage an operation met, wrapped for Ping; nil when none.
func (s *Store) damage() error {
	d := s.damaged.Load()
	if d == nil {
		return nil
	}
	return fmt.Errorf("file store %s: %w: %w", s.dir, store.ErrUnavailable, d)
}

// isDamaged reports whether err is bbolt's panic over a damaged file.
func isDamaged(err error) bool {
	var d *damagedError
	return errors.As(err, &d)
}
