package filestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// completeMany completes n keys named prefix000... on a store over dir,
// closes it, and returns the database file's bytes.
func completeMany(t *testing.T, dir, prefix string, n int) []byte {
	t.Helper()
	s, err := Open(Options{Path: dir, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		complete(t, s, fmt.Sprintf("%s%03d", prefix, i), time.Hour)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, dataFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFileTornByAPowerCutIsRefusedAtOpenByName: without fsync, a commit's
// pages reach the disk in whatever order the operating system writes them,
// so a power cut can keep the meta pages of a commit whose other pages it
// lost. Opening such a file fails with an error naming the file and what
// to do — not a crash — and releases the directory: once the file is
// restored, the store opens.
func TestFileTornByAPowerCutIsRefusedAtOpenByName(t *testing.T) {
	dir := t.TempDir()
	before := completeMany(t, dir, "a", 300)
	after := completeMany(t, dir, "b", 300)
	if len(after) <= len(before) {
		t.Fatalf("the second commits did not grow the file (%d, then %d bytes)", len(before), len(after))
	}
	// What the disk holds after the cut: the later meta pages (the first
	// two pages), the earlier contents of every other page.
	torn := make([]byte, len(after))
	copy(torn, before)
	pageSize := os.Getpagesize()
	copy(torn[:2*pageSize], after[:2*pageSize])
	path := filepath.Join(dir, dataFile)
	if err := os.WriteFile(path, torn, 0o600); err != nil {
		t.Fatal(err)
	}

	s, err := Open(Options{Path: dir, SweepInterval: -1})
	if err == nil {
		s.Close()
		t.Fatal("Open of a torn file succeeded; want it refused")
	}
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path) ||
		!strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "restore") {
		t.Fatalf("Open of a torn file = %v; want store.ErrCorrupt naming %s, the damage and what to do", err, path)
	}

	if err := os.WriteFile(path, before, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = Open(Options{Path: dir, SweepInterval: -1})
	if err != nil {
		t.Fatalf("Open of the restored file: %v", err)
	}
	defer s.Close()
	if b, err := s.Begin(ctx, "a000", store.Lease{}, time.Hour); err != nil || b.State != store.Completed {
		t.Errorf("Begin on a record of the restored file = %v, %v; want it completed", b.State, err)
	}
}

// TestDamagedPageIsAnUnreadableKeyAndTheStoreUnready: a page of the file
// damaged under a running store (a disk returning other bytes) makes the
// operations that read it fail with store.ErrCorrupt, so that the proxy
// refuses their keys rather than executing one that may have a record,
// and Ping reports the damage; the store does not crash the process.
func TestDamagedPageIsAnUnreadableKeyAndTheStoreUnready(t *testing.T) {
	dir := t.TempDir()
	completeMany(t, dir, "a", 300)
	s, _ := open(t, dir, Options{})
	var root uint64
	if err := s.db.View(func(tx *bolt.Tx) error {
		root = uint64(tx.Bucket(bucketKeys).Root())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, dataFile), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	pageSize := s.db.Info().PageSize
	_, err = f.WriteAt(make([]byte, pageSize), int64(root)*int64(pageSize))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping before any operation read the damaged page: %v", err)
	}

	b, err := s.Begin(ctx, "a001", store.Lease{}, time.Hour)
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("Begin on a key under the damaged page = %v, %v; want store.ErrCorrupt", b.State, err)
	}
	err = s.Ping(ctx)
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("Ping once the damage was met = %v; want store.ErrUnavailable saying the file is damaged", err)
	}
	if err := s.Extend(ctx, "a002", "token", time.Hour); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("a write over the damaged page = %v; want store.ErrCorrupt", err)
	}
}
