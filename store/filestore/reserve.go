package filestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// reserveFile holds disk space back for the writes that free space. When a
// commit finds the disk full, the store deletes it: the deletes, releases,
// renewals and sweeps that follow need pages of their own (bbolt copies
// every page it changes), and without a reserve a disk filled by anything
// — the store or another file on the volume — could not even take the
// commit that frees space. Writes that add entries are then refused, but
// for one write a second that tries whether there is room again: in the
// file, where deletes freed pages, or on the disk.
const reserveFile = "RESERVE"

// reserveBytes is the reserve's size; tests make it smaller.
var reserveBytes int64 = 8 << 20

// retryReserve is how often a store whose disk was full tries to write its
// reserve again.
const retryReserve = time.Second

// fillReserve writes the reserve file unless it is there in full.
func (s *Store) fillReserve() error {
	path := filepath.Join(s.dir, reserveFile)
	if st, err := os.Stat(path); err == nil && st.Size() == reserveBytes {
		return nil
	}
	tmp := path + ".tmp"
	err := writeZeros(tmp, reserveBytes)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// writeZeros writes n zero bytes to a new file at path and syncs it, so
// that its blocks are allocated (a sparse file would reserve nothing).
func writeZeros(path string, n int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for n > 0 && err == nil {
		var w int
		w, err = f.Write(buf[:min(n, int64(len(buf)))])
		n -= int64(w)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// releaseReserve gives the reserve's space to the commits that free space.
func (s *Store) releaseReserve() {
	s.reserveTried.Store(s.now().UnixNano())
	s.diskFull.Store(true)
	_ = os.Remove(filepath.Join(s.dir, reserveFile))
}

// roomOnDisk reports whether a write that adds an entry may go ahead: the
// disk is not known to be full, or a retryReserve has passed since it was
// found full, and this write tries (the reserve is written again first if
// it fits). A try that finds no space marks the disk full again.
func (s *Store) roomOnDisk() bool {
	if !s.diskFull.Load() {
		return true
	}
	now := s.now().UnixNano()
	last := s.reserveTried.Load()
	if now-last < int64(retryReserve) || !s.reserveTried.CompareAndSwap(last, now) {
		return false
	}
	_ = s.fillReserve()
	s.diskFull.Store(false)
	return true
}

// refillReserve writes the reserve again when it is missing and the disk
// has room for it twice over; the sweeper calls it.
func (s *Store) refillReserve() {
	if s.diskFull.Load() {
		return
	}
	if _, err := os.Stat(filepath.Join(s.dir, reserveFile)); err == nil {
		return
	}
	var fs syscall.Statfs_t
	if syscall.Statfs(s.dir, &fs) != nil || int64(fs.Bavail)*fs.Bsize < 2*reserveBytes {
		return
	}
	_ = s.fillReserve()
}

func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

func (s *Store) diskFullError(op string) error {
	return fmt.Errorf("file %s: %s: the disk is full: %w", op, s.dir, store.ErrFull)
}
