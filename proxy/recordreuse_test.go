package proxy

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
	"github.com/idempotency-proxy/idempotency-proxy/store/seal"
)

// unavailableCompletes fails its first n Complete calls as unavailable, so
// that the handler retries them in the background.
type unavailableCompletes struct {
	store.Store
	n atomic.Int64
}

func (s *unavailableCompletes) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	if s.n.Add(-1) >= 0 {
		return store.ErrUnavailable
	}
	return s.Store.Complete(ctx, key, token, rec, ttl)
}

// The handler reuses a record's header map once its key is settled. Through
// the layers the proxy runs (seal over tombstones over the store), with
// completions that first fail and are retried in the background, every
// replay still carries its own response's header and body, however many
// later responses reused the maps meanwhile.
func TestReplayKeepsItsOwnHeaderWhileLaterResponsesReuseTheMaps(t *testing.T) {
	kr, err := seal.Parse("test", []byte("k1 "+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))))
	if err != nil {
		t.Fatal(err)
	}
	for _, sealed := range []bool{false, true} {
		t.Run("sealed="+strconv.FormatBool(sealed), func(t *testing.T) {
			mem := memory.New(memory.Options{})
			t.Cleanup(func() { mem.Close() })
			flaky := &unavailableCompletes{Store: mem}
			flaky.n.Store(6)
			var st Store = store.WithTombstones(flaky, nil)
			if sealed {
				st = seal.New(st.(store.Store), kr)
			}
			e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
				k := r.Header.Get("X-Echo")
				w.Header()["X-Echo"] = []string{k, k + "/second"}
				w.Header().Set("Content-Type", "text/plain; key="+k)
				w.Write([]byte("body of " + k))
			}, withStore(st), withPolicy(func(p *Policy) {
				p.ExpiredKeys, p.ExpiredKeyWindow = ExpiredReject, time.Hour
			}))
			send := func(key string) *response {
				return e.do(t, "POST", "/x", key, "{}", "X-Echo", key)
			}
			wave := func(prefix string, n int) {
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() { send(fmt.Sprintf("%s-%d", prefix, i)) })
				}
				wg.Wait()
			}
			const n = 16
			wave("first", n)
			wave("second", n) // takes the maps the first wave gave back
			for i := range n {
				key := fmt.Sprintf("first-%d", i)
				var r *response
				wait.SucceedsSoon(t, 10*time.Second, func() error {
					if r = send(key); r.StatusCode == http.StatusConflict {
						return fmt.Errorf("%s still in flight", key)
					}
					return nil
				})
				want := "body of " + key
				switch {
				case !r.replayed():
					t.Errorf("%s: %d, not a replay", key, r.StatusCode)
				case fmt.Sprint(r.Header["X-Echo"]) != fmt.Sprint([]string{key, key + "/second"}):
					t.Errorf("%s: replayed X-Echo %q, want its own response's", key, r.Header["X-Echo"])
				case r.Header.Get("Content-Type") != "text/plain; key="+key:
					t.Errorf("%s: replayed Content-Type %q, want its own response's", key, r.Header.Get("Content-Type"))
				case r.body != want || r.Header.Get("Content-Length") != strconv.Itoa(len(want)):
					t.Errorf("%s: replayed %q with Content-Length %s, want %q", key, r.body, r.Header.Get("Content-Length"), want)
				}
			}
			if left := flaky.n.Load(); left >= 0 {
				t.Fatalf("%d completions left to fail: none was retried", left+1)
			}
			if got := e.up.calls.Load(); got != 2*n {
				t.Fatalf("%d executions, want %d", got, 2*n)
			}
		})
	}
}
