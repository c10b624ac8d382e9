package proxy

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

func TestStatusTTLMostSpecificWins(t *testing.T) {
	p := DefaultPolicy()
	p.TTL = time.Hour
	p.StatusTTL = StatusTTL{"5xx": time.Minute, "404": 10 * time.Minute, "503": time.Second, "2xx": 48 * time.Hour, "1xx": 2 * time.Hour, "429": 3 * time.Minute}
	for status, want := range map[int]time.Duration{
		201: 48 * time.Hour, 404: 10 * time.Minute, 400: time.Hour, 500: time.Minute,
		502: time.Minute, 503: time.Second, 302: time.Hour, 99: time.Hour, 600: time.Hour,
		100: 2 * time.Hour, 599: time.Minute,
		429: 3 * time.Minute, 428: time.Hour, 439: time.Hour, // a tens digit not 0
	} {
		if got := p.ttlFor(status); got != want {
			t.Errorf("ttlFor(%d) = %v, want %v", status, got, want)
		}
	}
	p.StatusTTL = nil
	if got := p.ttlFor(500); got != time.Hour {
		t.Errorf("without status_ttl: ttlFor(500) = %v, want ttl", got)
	}
}

// The configuration view shows status_ttl as one line, its keys in order.
func TestStatusTTLIsWrittenWithItsKeysInOrder(t *testing.T) {
	for _, tc := range []struct {
		ttl  StatusTTL
		want string
	}{
		{StatusTTL{"5xx": time.Minute, "404": 10 * time.Minute}, "{404: 10m0s, 5xx: 1m0s}"},
		{StatusTTL{"2xx": 72 * time.Hour}, "{2xx: 72h0m0s}"},
		{nil, "{}"},
	} {
		if got, err := tc.ttl.MarshalText(); err != nil || string(got) != tc.want {
			t.Errorf("%v: MarshalText = %q, %v; want %q", map[string]time.Duration(tc.ttl), got, err, tc.want)
		}
	}
}

func TestStatusTTLCheck(t *testing.T) {
	for _, tc := range []struct {
		ttl  StatusTTL
		want string
	}{
		{StatusTTL{"404": time.Minute, "5xx": time.Second, "100": 1, "599": 1}, ""},
		{StatusTTL{"600": time.Minute}, `status_ttl.600: invalid status "600"`},
		{StatusTTL{"099": time.Minute}, `status_ttl.099: invalid status "099"`},
		{StatusTTL{"6xx": time.Minute}, `status_ttl.6xx: invalid status "6xx"`},
		{StatusTTL{"4x": time.Minute}, `status_ttl.4x: invalid status "4x"`},
		{StatusTTL{"40x": time.Minute}, `status_ttl.40x: invalid status "40x"`},
		{StatusTTL{"5xx": 0}, "status_ttl.5xx: must be > 0, not 0s"},
		{StatusTTL{"404": -time.Second}, "status_ttl.404: must be > 0, not -1s"},
	} {
		p := DefaultPolicy()
		p.StatusTTL = tc.ttl
		var got []string
		for _, pr := range p.Check(nil) {
			got = append(got, pr.Error())
		}
		switch {
		case tc.want == "" && len(got) > 0:
			t.Errorf("%v: %q, want no problem", tc.ttl, got)
		case tc.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], tc.want)):
			t.Errorf("%v: %q, want %q", tc.ttl, got, tc.want)
		}
	}
}

// ttlStore records the ttl of every Complete.
type ttlStore struct {
	*memory.Store
	mu   sync.Mutex
	ttls map[string]time.Duration // by status
}

func (s *ttlStore) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	s.mu.Lock()
	s.ttls[strconv.Itoa(rec.Status)] = ttl
	s.mu.Unlock()
	return s.Store.Complete(ctx, key, token, rec, ttl)
}

// A recorded response is kept for its status's entry of status_ttl, its
// class's, else ttl; Idempotency-Expires says the same on the executed
// response and on its replays.
func TestStatusTTLKeepsEachAnswerForItsStatus(t *testing.T) {
	mem := memory.New(memory.Options{})
	t.Cleanup(func() { mem.Close() })
	st := &ttlStore{Store: mem, ttls: map[string]time.Duration{}}
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		w.WriteHeader(code)
	}, withStore(st), withPolicy(func(p *Policy) {
		p.TTL, p.AdvertiseExpiry = time.Hour, true
		p.StatusTTL = StatusTTL{"5xx": time.Minute, "404": 10 * time.Minute}
	}))
	for status, want := range map[int]time.Duration{201: time.Hour, 404: 10 * time.Minute, 500: time.Minute, 409: time.Hour} {
		path := "/" + strconv.Itoa(status)
		before := time.Now().Truncate(time.Second)
		first := e.do(t, "POST", path, "k"+path, `{}`)
		after := time.Now()
		if first.StatusCode != status {
			t.Fatalf("%s: status %d", path, first.StatusCode)
		}
		st.mu.Lock()
		got := st.ttls[strconv.Itoa(status)]
		st.mu.Unlock()
		if got != want {
			t.Errorf("%d recorded for %v, want %v", status, got, want)
		}
		for _, r := range []*response{first, e.do(t, "POST", path, "k"+path, `{}`)} {
			exp, err := http.ParseTime(r.Header.Get(ExpiresHeader))
			if err != nil || exp.Before(before.Add(want)) || exp.After(after.Add(want).Add(time.Second)) {
				t.Errorf("%d (replayed=%v): Idempotency-Expires %q, want creation + %v", status, r.replayed(), r.Header.Get(ExpiresHeader), want)
			}
		}
	}
}
