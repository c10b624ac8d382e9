package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

// fileLockTTL is the lease of fileConfig: long enough that a restarted
// proxy is serving again well before a killed owner's lease runs out.
const fileLockTTL = 5 * time.Second

func fileConfig(up *upstream, dir string, fsync bool) proxyConfig {
	return proxyConfig{
		Upstream:        up.URL(),
		UpstreamTimeout: 10 * time.Second,
		ShutdownTimeout: 10 * time.Second,
		FilePath:        dir,
		FileFsync:       fsync,
		Defaults:        map[string]string{"ttl": "5m", "lock_ttl": fileLockTTL.String()},
	}
}

// fileLoadKey is one key a load worker sent before the kill.
type fileLoadKey struct {
	key   string
	reply reply
}

// TestFileStoreKeepsWhatItAcknowledgedAcrossSIGKILL runs clients against a
// proxy on the file store, SIGKILLs it under load and restarts it on the
// same directory, then checks against the upstream's own count what
// docs/guarantees.md promises ("What survives what"): every completed key
// replays without reaching the upstream, and every key whose request was
// in the upstream at the kill is locked (409) until lock_ttl, then
// executes once more.
//
// Each worker sends its keys one after another on one connection. The
// server reads a connection's next request only when the previous handler
// has returned, and the handler returns after the record's commit: so when
// a worker holds the answer to a key, the record of its previous key was
// acknowledged by the store. Only a worker's last completed key may have
// lost its record with the process, and then its lease stays.
func TestFileStoreKeepsWhatItAcknowledgedAcrossSIGKILL(t *testing.T) {
	for _, fsync := range []bool{false, true} {
		t.Run(fmt.Sprintf("fsync=%v", fsync), func(t *testing.T) {
			up := startUpstream(t)
			p := startProxy(t, "file", fileConfig(up, t.TempDir(), fsync))
			const workers = 8
			ctx, stop := context.WithCancel(context.Background())
			sent := make([][]fileLoadKey, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tr := &http.Transport{MaxConnsPerHost: 1}
					defer tr.CloseIdleConnections()
					c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
					for i := 0; i < 10_000 && ctx.Err() == nil; i++ {
						key := fmt.Sprintf("w%d-%d", w, i)
						r := send(ctx, c, p.URL(), request{Key: key, Header: map[string]string{hdrSleep: fmt.Sprintf("%dms", i%7*5)}})
						sent[w] = append(sent[w], fileLoadKey{key, r})
						if r.Err != nil {
							return // the proxy is gone
						}
					}
				}()
			}
			up.WaitCount(fmt.Sprintf("w%d-%d", workers-1, 20), 1, 20*time.Second)
			p.Kill()
			killed := time.Now()
			wg.Wait()
			stop()
			p.Restart()
			restarted := time.Since(killed)
			if restarted > fileLockTTL/2 {
				t.Fatalf("restart took %v: leases of lock_ttl %v may have run out before the checks", restarted, fileLockTTL)
			}

			c := newClient(t, 10*time.Second)
			var completed, replayed int
			locked := map[string]int{} // key: its executions at the kill
			for _, keys := range sent {
				for i, k := range keys {
					before := up.Count(k.key)
					r := mustSend(t, c, p.URL(), request{Key: k.key})
					after := up.Count(k.key)
					last := i >= len(keys)-2 // the last completed key, or the one cut off
					switch {
					case k.reply.Err == nil:
						completed++
						if r.Replayed() && r.Body == k.reply.Body {
							replayed++
						} else if !last || r.Status != http.StatusConflict {
							t.Errorf("key %s completed before the kill (%s): after the restart %s, want its replay", k.key, k.reply, r)
						}
					case before == 0 && r.Status == http.StatusCreated:
						// Cut off before it took a lease: a new key.
						continue
					case r.Replayed():
						// Recorded before the kill, its answer lost with the
						// connection.
						if ex := up.Execs(k.key); len(ex) != 1 || r.Body != ex[0].Body {
							t.Errorf("key %s cut off at the kill: after the restart %s, want the replay of its one execution", k.key, r)
						}
					default:
						// Taken before the kill, whether or not it reached
						// the upstream: its lease survived.
						if r.Status != http.StatusConflict || r.Problem() != "in-flight" {
							t.Errorf("key %s in flight at the kill: after the restart %s, want 409 in-flight", k.key, r)
						}
					}
					if r.Status == http.StatusConflict {
						locked[k.key] = before
					}
					if r.Status != http.StatusCreated && after != before {
						t.Errorf("key %s: the request after the restart reached the upstream (%d executions, were %d)", k.key, after, before)
					}
				}
			}
			t.Logf("restart in %v; %d keys completed before the kill, %d replayed after it, %d locked", restarted, completed, replayed, len(locked))
			if completed < 100 || len(locked) == 0 {
				t.Fatalf("%d completed, %d locked at the kill: the load did not exercise both cases", completed, len(locked))
			}

			// Once lock_ttl has passed, each locked key executes once more,
			// then replays that execution.
			time.Sleep(time.Until(killed.Add(fileLockTTL + 500*time.Millisecond))) // leases of the killed owner run out by the clock
			for key, before := range locked {
				r := mustSend(t, c, p.URL(), request{Key: key})
				ex := up.Execs(key)
				if len(ex) != before+1 || r.Status != http.StatusCreated || r.Replayed() || r.Body != ex[before].Body {
					t.Errorf("key %s after lock_ttl: %s with %d executions (%d at the kill), want one fresh execution", key, r, len(ex), before)
					continue
				}
				if again := mustSend(t, c, p.URL(), request{Key: key}); !again.Replayed() || again.Body != ex[before].Body {
					t.Errorf("key %s: %s, want the replay of its last execution", key, again)
				}
			}
		})
	}
}

// TestFileStoreOneProcessPerDirectory starts a second proxy on a directory
// a running proxy holds: it exits 1 naming the directory, and the first
// keeps serving, its records intact.
func TestFileStoreOneProcessPerDirectory(t *testing.T) {
	up := startUpstream(t)
	dir := t.TempDir()
	first := startProxy(t, "first", fileConfig(up, dir, false))
	c := newClient(t, 10*time.Second)
	before := mustSend(t, c, first.URL(), request{Key: "held"})

	stderr := &testbin.Buffer{}
	second, err := testbin.Launch(testbin.Command{Path: proxyBin, Args: []string{
		"--upstream", up.URL(), "--store-path", dir,
		"--listen", freeAddr(t), "--admin-listen", freeAddr(t),
	}, Stdout: stderr}, stderr)
	if err != nil {
		t.Fatal(err)
	}
	code, exited := second.Wait(readyTimeout)
	if !exited {
		second.Kill()
		t.Fatalf("a second proxy on %s is still running, want exit 1", dir)
	}
	if code != 1 || !strings.Contains(stderr.String(), dir) || !strings.Contains(stderr.String(), "in use by another process") {
		t.Errorf("second proxy on %s: exit %d, stderr:\n%s\nwant exit 1 naming the directory as in use", dir, code, stderr)
	}

	waitStatus(t, first.AdminURL()+"/readyz", http.StatusOK, 5*time.Second)
	if r := mustSend(t, c, first.URL(), request{Key: "held"}); !r.Replayed() || r.Body != before.Body {
		t.Errorf("first proxy after the second was refused: %s, want the replay of %q", r, before.Body)
	}
	if r := mustSend(t, c, first.URL(), request{Key: "new"}); r.Status != http.StatusCreated {
		t.Errorf("first proxy, new key: %s, want 201", r)
	}
}

// TestFileStoreTornByAPowerCutStopsTheProxyByName: with fsync: false, a
// power cut can keep the meta pages of the last commits and lose the pages
// they name (the operating system writes a commit's pages in any order).
// A proxy started on such a directory exits 1 naming the damaged file and
// what to do, instead of crashing with a panic on every restart.
func TestFileStoreTornByAPowerCutStopsTheProxyByName(t *testing.T) {
	up := startUpstream(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "idempotency.db")
	p := startProxy(t, "file", fileConfig(up, dir, false))
	c := newClient(t, 10*time.Second)
	snapshot := func(prefix string, n int) []byte {
		t.Helper()
		for i := range n {
			mustSend(t, c, p.URL(), request{Key: fmt.Sprintf("%s%d", prefix, i)})
		}
		p.Kill()
		b, err := os.ReadFile(data)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	before := snapshot("a", 300)
	p.Restart()
	after := snapshot("b", 1000)
	if len(after) <= len(before) {
		t.Fatalf("the second requests did not grow %s (%d, then %d bytes)", data, len(before), len(after))
	}
	// What the disk holds after the cut: the later meta pages (the first
	// two pages), the earlier contents of every other page.
	torn := make([]byte, len(after))
	copy(torn, before)
	copy(torn[:2*os.Getpagesize()], after)
	if err := os.WriteFile(data, torn, 0o600); err != nil {
		t.Fatal(err)
	}

	stderr := &testbin.Buffer{}
	proc, err := testbin.Launch(testbin.Command{Path: proxyBin, Args: []string{
		"--upstream", up.URL(), "--store-path", dir,
		"--listen", freeAddr(t), "--admin-listen", freeAddr(t),
	}, Stdout: stderr}, stderr)
	if err != nil {
		t.Fatal(err)
	}
	code, exited := proc.Wait(readyTimeout)
	if !exited {
		proc.Kill()
		t.Fatalf("a proxy on the torn %s is still running, want exit 1", data)
	}
	out := stderr.String()
	if code != 1 || !strings.Contains(out, data) || !strings.Contains(out, "damaged") ||
		!strings.Contains(out, "move idempotency.db aside") || strings.Contains(out, "panic") {
		t.Errorf("proxy on the torn %s: exit %d, stderr:\n%s\nwant exit 1 naming the file as damaged and what to do, no panic", data, code, out)
	}
}
