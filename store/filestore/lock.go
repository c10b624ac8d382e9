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
			return nil, fmt.Errorf("file store %s: %w%s: one proxy process per directory", dir, store.ErrInUse, holder(path))
		}
		return nil, fmt.Errorf("file store %s: lock %s: %w", dir, path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// holder names the pid written in the lock file, if it can be read.
func holder(path string) string {
	b, err := os.ReadFile(path)
	if pid := strings.TrimSpace(string(b)); err == nil && pid != "" {
		return " (pid " + pid + ")"
	}
	return ""
}
