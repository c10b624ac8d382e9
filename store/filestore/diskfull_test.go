package filestore

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// smallDisk mounts a tmpfs of size bytes for the test. It needs root, as
// CI has; elsewhere the test is skipped.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount a tmpfs (CI runs as root): %v", err)
		}
		t.Skipf("mount a tmpfs: %v (needs root)", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			out, _ := exec.Command("umount", "-l", dir).CombinedOutput()
			t.Logf("unmount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// TestFullDiskIsAFullStore fills a small disk far below MaxBytes: the
// write that finds no space fails with store.ErrFull naming the cause,
// records written before stay readable, a lease stays its owner's and can
// be renewed, deletes go through on the reserve's space, and once there is
// room again the lease's completion goes through.
func TestFullDiskIsAFullStore(t *testing.T) {
	defer func(n int64) { reserveBytes = n }(reserveBytes)
	reserveBytes = 512 << 10
	dir := smallDisk(t, 4<<20)
	s, c := open(t, dir, Options{})
	owned := mustAcquire(t, s, "owned", time.Hour)
	body := strings.Repeat("z", 3000)
	var keys []string
	var fullErr error
	for i := 0; i < 10_000; i++ {
		key := "k" + strconv.Itoa(i)
		b, err := s.Begin(ctx, key, store.Lease{}, time.Hour)
		if err == nil {
			err = s.Complete(ctx, key, b.Token, testRecord(body), time.Hour)
			if err == nil {
				keys = append(keys, key)
			}
		}
		if err != nil {
			fullErr = err
			break
		}
	}
	if !errors.Is(fullErr, store.ErrFull) || !strings.Contains(fullErr.Error(), "no space left on device") {
		t.Fatalf("write on a full disk after %d records: %v; want ErrFull with its cause", len(keys), fullErr)
	}
	if h, _ := s.Health(ctx); !h.Full {
		t.Errorf("Health on a full disk = %+v, want full", h)
	}
	for _, key := range []string{keys[0], keys[len(keys)-1]} {
		if b, err := s.Begin(ctx, key, store.Lease{}, time.Hour); err != nil || b.State != store.Completed {
			t.Errorf("record %s on a full disk: %v, %v; want it replayed", key, b.State, err)
		}
	}
	if _, err := s.Begin(ctx, "new", store.Lease{}, time.Hour); !errors.Is(err, store.ErrFull) {
		t.Errorf("Begin of a new key on a full disk: %v, want ErrFull", err)
	}
	rec := testRecord(`{"done":true}`)
	if err := s.Complete(ctx, "owned", owned, rec, time.Hour); !errors.Is(err, store.ErrFull) {
		t.Fatalf("Complete on a full disk: %v, want ErrFull", err)
	}
	if err := s.Extend(ctx, "owned", owned, time.Hour); err != nil {
		t.Fatalf("Extend on a full disk: %v, want the lease renewed", err)
	}
	for _, key := range keys[:len(keys)/2] {
		if err := s.Delete(ctx, key); err != nil {
			t.Fatalf("Delete on a full disk: %v", err)
		}
	}
	c.Advance(retryReserve)
	if err := s.Complete(ctx, "owned", owned, rec, time.Hour); err != nil {
		t.Fatalf("Complete once space returned: %v", err)
	}
	if h, _ := s.Health(ctx); h.Full {
		t.Errorf("Health once space returned = %+v, want not full", h)
	}
}
