//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// scenario is one kind of traffic.
type scenario int

const (
	miss  scenario = iota // every request a new key: lease, forward, record
	hit                   // a few keys recorded beforehand: replay only
	mixed                 // 90% new keys, 10% retries of a recent key
	noKey                 // no key header: pass-through
)

var scenarios = []scenario{miss, hit, mixed, noKey}

func (s scenario) String() string {
	return [...]string{"miss", "hit", "mixed", "no-key"}[s]
}

// hitKeys is how many keys the hit scenario cycles through.
const hitKeys = 64

// requestBody is what every benchmark request sends: a small JSON payload
// like a payment API's, identical for a key's retries so they match its
// fingerprint.
var requestBody = []byte(`{"amount":2000,"currency":"eur","customer":"cus_9s6XKzkNRiz8i3","description":"load benchmark"}`)

// maxRequestsPerWorker bounds a run in count as well as in time: no
// connection sends more.
const maxRequestsPerWorker = 5_000_000

// loader drives closed-loop load: each of its connections sends a request,
// waits for the whole response, and sends the next.
type loader struct {
	runID   string
	seq     int    // distinguishes the keys of successive runs
	path    string // request target; "" means defaultPath
	bodyLen int    // every response body must be this long; 0: any length
	limit   int    // requests a run sends at most (beyond one per client); 0: no bound but time
	// forwardsAll is set for a proxy in shadow mode: it forwards every
	// request, a retry too, so every answer must be an execution.
	forwardsAll bool
}

// defaultPath is the request target of the benchmark's requests.
const defaultPath = "/v1/charges"

func (l *loader) target() string {
	if l.path == "" {
		return defaultPath
	}
	return l.path
}

// sample is the outcome of one run of one scenario against one target.
type sample struct {
	requests  int
	elapsed   time.Duration
	latencies []time.Duration // unsorted
}

func (s sample) rate() float64 { return float64(s.requests) / s.elapsed.Seconds() }

// expect says whether a proxy target must mark a response as replayed;
// checking it proves the scenario exercised the path it is named after.
type expect int

const (
	anyReplay expect = iota // the plain proxy: no header either way
	fresh
	replayed
)

// run sends scen traffic to base over conc connections for d. The first
// error — a failed request, a non-2xx status, or a replay where an
// execution was due (or the reverse) — stops the run and is returned.
func (l *loader) run(ctx context.Context, base string, isProxy bool, scen scenario, conc int, d time.Duration) (sample, error) {
	l.seq++
	sources := make([]*keySource, conc)
	for w := range sources {
		sources[w] = &keySource{
			scen: scen, isProxy: isProxy, forwardsAll: l.forwardsAll, runID: l.runID, w: w,
			prefix: l.runID + "-" + strconv.Itoa(l.seq) + "-" + strconv.Itoa(w) + "-",
		}
	}
	drv, err := newDriver(base, l.target(), sources)
	if err != nil {
		return sample{}, err
	}
	defer drv.close()
	drv.limit = l.limit
	if l.bodyLen > 0 {
		drv.bodyLen = l.bodyLen
	}
	start := time.Now()
	lat, err := drv.run(ctx, start.Add(d))
	smp := sample{requests: len(lat), elapsed: time.Since(start), latencies: lat}
	if err != nil {
		return smp, fmt.Errorf("%s via %s: %w", scen, base, err)
	}
	return smp, nil
}

// keySource yields the keys one connection sends, and whether each answer
// must be a replay.
type keySource struct {
	scen    scenario
	isProxy bool // the plain proxy marks nothing either way
	// forwardsAll: a retry is forwarded too (shadow mode), never replayed.
	forwardsAll bool
	runID       string
	prefix      string // of new keys: unique to the run, the measurement and the connection
	w, i        int
	recent      [16]string
	nRecent     int
}

func (k *keySource) next() (key string, want expect) {
	i := k.i
	k.i++
	want = fresh
	switch {
	case k.scen == noKey:
	case k.scen == hit:
		key, want = hitKey(k.runID, k.w*7+i), replayed
	case k.scen == mixed && i%10 == 9 && k.nRecent > 0:
		key, want = k.recent[(i/10)%min(k.nRecent, len(k.recent))], replayed
	default:
		key = k.prefix + strconv.Itoa(i)
		k.recent[k.nRecent%len(k.recent)] = key
		k.nRecent++
	}
	switch {
	case !k.isProxy:
		want = anyReplay
	case k.forwardsAll:
		want = fresh
	}
	return key, want
}

func hitKey(runID string, i int) string {
	return runID + "-hit-" + strconv.Itoa(i%hitKeys)
}

// warmHits records the hit keys on a target: each is sent twice, and on a
// proxy the second must be a replay (in shadow mode, an execution).
func (l *loader) warmHits(ctx context.Context, base string, isProxy bool) error {
	second := replayed
	switch {
	case !isProxy:
		second = anyReplay
	case l.forwardsAll:
		second = fresh
	}
	client := &http.Client{Timeout: responseTimeout}
	defer client.CloseIdleConnections()
	for _, want := range []expect{anyReplay, second} {
		for i := range hitKeys {
			key := hitKey(l.runID, i)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+l.target(), bytes.NewReader(requestBody))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			resp, err := client.Do(req)
			if err != nil {
				return fmt.Errorf("recording hit keys via %s: %w", base, err)
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			r := response{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
			if err := check(r, key, want); err != nil {
				return fmt.Errorf("recording hit keys via %s: %w", base, err)
			}
			if l.bodyLen > 0 && n != int64(l.bodyLen) {
				return fmt.Errorf("recording hit keys via %s: key %q: body of %d bytes, want %d", base, key, n, l.bodyLen)
			}
		}
	}
	return nil
}
