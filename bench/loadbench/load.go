package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
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

// maxRequestsPerWorker bounds a run in count as well as in time.
const maxRequestsPerWorker = 5_000_000

// loader drives closed-loop load: each of its workers sends a request on
// its own connection, waits for the whole response, and sends the next.
type loader struct {
	runID string
	seq   int // distinguishes the keys of successive runs
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

// run sends scen traffic to base with conc workers for d. The first error —
// a failed request, a non-2xx status, or a replay where an execution was
// due (or the reverse) — stops the run and is returned.
func (l *loader) run(ctx context.Context, base string, isProxy bool, scen scenario, conc int, d time.Duration) (sample, error) {
	l.seq++
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		total    sample
		wg       sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat, err := l.worker(ctx, base, isProxy, scen, w, end)
			mu.Lock()
			defer mu.Unlock()
			total.requests += len(lat)
			total.latencies = append(total.latencies, lat...)
			if err != nil && firstErr == nil {
				firstErr = err
				cancel()
			}
		}()
	}
	wg.Wait()
	total.elapsed = time.Since(start)
	if firstErr != nil {
		return total, fmt.Errorf("%s via %s: %w", scen, base, firstErr)
	}
	return total, ctx.Err()
}

func (l *loader) worker(ctx context.Context, base string, isProxy bool, scen scenario, w int, end time.Time) ([]time.Duration, error) {
	c, err := newClient(base)
	if err != nil {
		return nil, err
	}
	defer c.close()
	prefix := l.runID + "-" + strconv.Itoa(l.seq) + "-" + strconv.Itoa(w) + "-"
	lat := make([]time.Duration, 0, 4096)
	var recent [16]string
	var nRecent int
	for i := 0; i < maxRequestsPerWorker && ctx.Err() == nil; i++ {
		key, want := "", fresh
		switch {
		case scen == noKey:
		case scen == hit:
			key, want = hitKey(l.runID, w*7+i), replayed
		case scen == mixed && i%10 == 9 && nRecent > 0:
			key, want = recent[(i/10)%min(nRecent, len(recent))], replayed
		default:
			key = prefix + strconv.Itoa(i)
			recent[nRecent%len(recent)] = key
			nRecent++
		}
		if !isProxy {
			want = anyReplay
		}
		t := time.Now()
		if err := c.do(ctx, key, want); err != nil {
			return lat, err
		}
		done := time.Now()
		lat = append(lat, done.Sub(t))
		if done.After(end) {
			break
		}
	}
	return lat, nil
}

func hitKey(runID string, i int) string {
	return runID + "-hit-" + strconv.Itoa(i%hitKeys)
}

// warmHits records the hit keys on a target: each is sent twice, and on a
// proxy the second must be a replay.
func (l *loader) warmHits(ctx context.Context, base string, isProxy bool) error {
	second := replayed
	if !isProxy {
		second = anyReplay
	}
	c, err := newClient(base)
	if err != nil {
		return err
	}
	defer c.close()
	for _, want := range []expect{anyReplay, second} {
		for i := range hitKeys {
			if err := c.do(ctx, hitKey(l.runID, i), want); err != nil {
				return fmt.Errorf("recording hit keys via %s: %w", base, err)
			}
		}
	}
	return nil
}
