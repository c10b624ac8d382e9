package filestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// lockFile is the lock's name inside the directory.
const lockFile = "LOCK"

// lockDir takes an exclusive flock on dir's LOCK file and writes the
// caller's pid into it. The kernel drops the lock when the process dies,
// however it dies, so a restarted proxy never finds a stale lock.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("file store: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			// Two processes over one directory would each believe they
			// own its leases.
			return nil, &InUseError{Dir: dir, PID: holder(path)}
		}
		return nil, fmt.Errorf("file store %s: lock %s: %w", dir, path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// InUseError is the directory held by another process; it wraps
// store.ErrInUse.
type InUseError struct {
	Dir string
	PID string // the holder's, as written in the lock file; "" when unreadable
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("file store %s: %v%s: one proxy process per directory", e.Dir, store.ErrInUse, e.holder())
}

func (e *InUseError) Unwrap() error { return store.ErrInUse }

// holder is " (pid N)", or "" when the pid is unknown.
func (e *InUseError) holder() string {
	if e.PID == "" {
		return ""
	}
	return " (pid " + e.PID + ")"
}

// HeldBy says who has the directory open, for a caller to which that is
// the store working (--check beside the running proxy).
func (e *InUseError) HeldBy() string {
	return "open in the running proxy" + e.holder()
}

// holder reads the pid written in the lock file, "" if it cannot.
func holder(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
