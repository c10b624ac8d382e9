//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
)

// A hundred concurrent 1 MiB responses are recorded, and a hundred 2 MiB
// ones streamed past the recording limit, without the proxy's resident
// memory passing a few hundred MiB: recording holds at most
// max_response_body per request, and bodies over it are never buffered.
func TestMemoryBoundedUnderLargeResponses(t *testing.T) {
	redis := redistest.Start(t)
	up := startUpstream(t)
	cfg := baseConfig(up, redis.URL())
	cfg.Defaults["max_response_body"] = "1MiB"
	// This test is about memory, not time. Under the race detector and a
	// parallel test run, a hundred large bodies take a while to produce, and
	// a hundred 1 MiB records at once queue for Redis (the README says to
	// raise redis.timeout for large records): every bound is far above what
	// the work takes, and lock_ttl with it, so that no lease lapses while
	// its renewals and record wait behind the others and each replay finds
	// its record.
	const slowest = 2 * time.Minute
	cfg.UpstreamTimeout = slowest
	cfg.RedisTimeout = slowest / 4
	cfg.Defaults["lock_ttl"] = slowest.String()
	p := startProxy(t, "rss", cfg)
	c := newClient(t, slowest+time.Minute)

	const concurrent = 100
	for _, tc := range []struct {
		name    string
		pad     int
		omitted bool
	}{
		{"recorded", 1<<20 - 256, false}, // body just under 1 MiB with its JSON head
		{"over the limit", 2 << 20, true},
	} {
		var wg sync.WaitGroup
		errs := make(chan string, concurrent)
		for i := range concurrent {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rq := request{Key: fmt.Sprintf("%s-%d", tc.name, i), Body: "{}",
					Header: map[string]string{hdrPad: strconv.Itoa(tc.pad), hdrSleep: "200ms"}}
				r := send(context.Background(), c, p.URL(), rq)
				if r.Err != nil || r.Status != http.StatusCreated || len(r.Body) < tc.pad {
					errs <- fmt.Sprintf("%s %d: status %d, %d bytes, %v", tc.name, i, r.Status, len(r.Body), r.Err)
					return
				}
				again := replayOf(c, p.URL(), rq, slowest)
				if !again.Replayed() || (again.Header.Get("Idempotent-Body-Omitted") == "true") != tc.omitted {
					errs <- fmt.Sprintf("%s %d: replay %s, omitted %q", tc.name, i, again, again.Header.Get("Idempotent-Body-Omitted"))
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
	}
	peak := peakRSS(t, p.PID())
	t.Logf("proxy peak RSS: %d MiB after %d concurrent 1 MiB and %d concurrent 2 MiB responses", peak>>20, concurrent, concurrent)
	if limit := int64(512 << 20); peak > limit {
		t.Fatalf("proxy peak RSS %d MiB, want under %d MiB", peak>>20, limit>>20)
	}
}

// replayOf sends rq again until its key is no longer in flight, honouring
// Retry-After, or within has passed: a client can read the last byte of a
// response before the proxy has recorded it, and a retry then gets 409.
func replayOf(c *http.Client, base string, rq request, within time.Duration) reply {
	deadline := time.Now().Add(within)
	for {
		r := send(context.Background(), c, base, rq)
		if r.Err != nil || r.Problem() != "in-flight" || time.Now().After(deadline) {
			return r
		}
		wait, err := strconv.Atoi(r.Header.Get("Retry-After"))
		if err != nil || wait < 1 {
			return r
		}
		time.Sleep(time.Duration(wait) * time.Second) // what Retry-After asks of a client
	}
}

// peakRSS is the process's resident-set high-water mark (VmHWM), in bytes.
// The file builds on Linux only, where /proc is always there: a process
// without it is a failure, not a reason to skip.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read the proxy's peak memory: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}
