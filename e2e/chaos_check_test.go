package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// chaosLog records every reply every client got, by key, and the faults
// injected.
type chaosLog struct {
	mu     sync.Mutex
	keys   map[string]*keyLog
	names  []string
	faults []faultEvent
}

// faultEvent is one fault: its name (faultNames), when it began and when
// it was undone (the store, upstream or proxy restarted), and the proxy it
// hit ("" for the store and the upstream).
type faultEvent struct {
	name      string
	at, until time.Time
	base      string
}

// fault records a fault beginning now; the returned func records its end.
func (cl *chaosLog) fault(name, base string) (ended func()) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	i := len(cl.faults)
	cl.faults = append(cl.faults, faultEvent{name: name, at: time.Now(), base: base})
	return func() {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		cl.faults[i].until = time.Now()
	}
}

// storeDownAround reports whether the store was down at some moment while
// e's lease could be live: from lock_ttl before e reached the upstream (its
// Begin came first) to lock_ttl after its work ended (its recording came
// after, retried while its lease lasts). Only then can the store lose the
// lease of a proxy that is running: it renews the lease every lock_ttl/3 and
// records right after the upstream answers, so a store that answers keeps
// the lease unless the proxy stalls past lock_ttl, which the run never makes
// it do. A loss anywhere else is a lease that did not hold. cl.mu must be
// held.
func (cl *chaosLog) storeDownAround(e execution) bool {
	from, to := e.At.Add(-lockTTL), e.At.Add(e.Work+lockTTL)
	for _, f := range cl.faults {
		if f.name == faultNames[0] && f.at.Before(to) && (f.until.IsZero() || f.until.After(from)) {
			return true
		}
	}
	return false
}

// cutWhileDetached reports whether a 504 upstream-timeout's call, which
// went on detached for up to chaosMaxExecution, may have been cut by a
// fault: the upstream killed under it (on_upstream_error: release frees the
// key), or its proxy SIGKILLed (the lease expires at lock_ttl, as for any
// request a crash cuts). docs/guarantees.md permits one more execution for
// each. A SIGTERM lets it finish (shutdown_timeout is above max_execution),
// and a Redis outage is in the lease budget. cl.mu must be held.
func (cl *chaosLog) cutWhileDetached(r reply) bool {
	if r.Err != nil || r.Problem() != "upstream-timeout" {
		return false
	}
	for _, f := range cl.faults {
		if f.at.Before(r.At) || f.at.After(r.At.Add(chaosMaxExecution)) {
			continue
		}
		if f.name == "upstream killed" || (f.name == "proxy SIGKILLed" && f.base == r.Base) {
			return true
		}
	}
	return false
}

// cutAtMaxExecution counts the calls of key that a replica logged it cut
// at upstream.max_execution: a detached call whose answer came later than
// that, as on a loaded machine, which on_upstream_error (release, the
// run's) frees for the retry to execute again, as docs/guarantees.md
// permits. The key_hash each replica logs is the one its key API gives
// for the key. cl.mu need not be held.
func cutAtMaxExecution(t *testing.T, ps []*proxyProc, key string) int {
	t.Helper()
	n := 0
	for _, p := range ps {
		body, err := json.Marshal(map[string]string{"key": key, "method": "POST", "path": "/v1/orders", "host": p.listen})
		if err != nil {
			t.Fatal(err)
		}
		var hashed struct {
			KeyHash string `json:"key_hash"`
		}
		adminCall(t, p, chaosToken, "POST", "/admin/hash", body, &hashed)
		for line := range strings.Lines(p.Logs()) {
			if !strings.Contains(line, hashed.KeyHash) || !strings.Contains(line, cutAtMaxExecutionError) {
				continue
			}
			var l struct {
				Msg     string `json:"msg"`
				KeyHash string `json:"key_hash"`
				Error   string `json:"error"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "upstream request failed" &&
				l.KeyHash == hashed.KeyHash && l.Error == cutAtMaxExecutionError {
				n++
			}
		}
	}
	return n
}

// cutAtMaxExecutionError is the error the proxy logs for a call it cut at
// upstream.max_execution.
const cutAtMaxExecutionError = "upstream call cut at upstream.max_execution"

type keyLog struct{ replies []reply }

func (cl *chaosLog) add(key string, replies []reply) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	k := cl.keys[key]
	if k == nil {
		k = &keyLog{}
		cl.keys[key] = k
		cl.names = append(cl.names, key)
	}
	k.replies = append(k.replies, replies...)
}

// pick returns a key used before, or "" when there is none yet.
func (cl *chaosLog) pick(rng *rand.Rand) string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if len(cl.names) == 0 {
		return ""
	}
	return cl.names[rng.IntN(len(cl.names))]
}

func (cl *chaosLog) keyNames() []string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return slices.Clone(cl.names)
}

// ambiguous reports whether a reply leaves the client unsure whether the
// upstream ran: docs/guarantees.md then permits one more execution on retry. A 502
// upstream-failed is on_upstream_error: release; a connection cut by a
// killed proxy is the "proxy killed mid-request" case. A refused
// connection reached no one.
func ambiguous(r reply) bool {
	if r.Err != nil {
		return !errors.Is(r.Err, syscall.ECONNREFUSED)
	}
	return r.Problem() == "upstream-failed"
}

// leaseBudget is what the replicas counted over the run: extra executions
// that no single key's replies explain must be covered by these.
type leaseBudget struct {
	lockLost   int // leases found lost (idempotency_proxy_lock_lost_total)
	unrecorded int // responses the store was down to record
}

// check verifies the chaos invariants:
//   - per key, every execution beyond the first is explained: by an
//     ambiguous reply of that key, or a 504 whose detached call a fault
//     cut or, as its replica logged, upstream.max_execution cut, else by a
//     lease the store lost or a response it was down to record. Those last are drawn from a global budget (the proxies' count
//     of lost leases and unrecorded responses), and each needs an earlier
//     execution of the key whose lease was live while the store was down
//     (storeDownAround): a store that loses leases while it answers, such as
//     one whose Begin does not take the lease, is caught even though the
//     proxy counts every loss;
//   - every 2xx a client saw is the body of one of the key's executions,
//     and every replay of a key is the same recorded body; some key is
//     replayed, so records held;
//   - after the faults and lock_ttl, every key is replayed or executed,
//     never 409.
func (cl *chaosLog) check(t *testing.T, up *upstream, ps []*proxyProc, budget leaseBudget, final map[string]reply) {
	t.Helper()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	left := budget.lockLost + budget.unrecorded
	var requests, executions, replays, byAmbiguity, byDetachedCut, byMaxExecution, byBudget, timeouts int
	for _, key := range cl.names {
		replies := append(slices.Clone(cl.keys[key].replies), final[key])
		ex := up.Execs(key)
		executions += len(ex)
		requests += len(replies)
		unsure, cut, uncut := 0, 0, 0
		for _, r := range replies {
			switch {
			case ambiguous(r):
				unsure++
			case cl.cutWhileDetached(r):
				cut++
			case r.Err == nil && r.Problem() == "upstream-timeout":
				uncut++ // detached, and no fault cut it
			}
			if r.Problem() == "upstream-timeout" {
				timeouts++
			}
		}
		if extra := len(ex) - 1; extra > 0 {
			covered := min(extra, unsure)
			byAmbiguity += covered
			byCut := min(extra-covered, cut)
			byDetachedCut += byCut
			covered += byCut
			maxCut := 0
			if extra > covered && uncut > 0 {
				maxCut = min(uncut, cutAtMaxExecution(t, ps, key))
				byMaxCut := min(extra-covered, maxCut)
				byMaxExecution += byMaxCut
				covered += byMaxCut
			}
			if rest := extra - covered; rest > 0 {
				// The execution after a lost lease follows the one that
				// lost it: the last execution lost nothing anyone saw.
				downAround := 0
				for _, e := range ex[:len(ex)-1] {
					if cl.storeDownAround(e) {
						downAround++
					}
				}
				switch {
				case rest > downAround:
					t.Errorf("key %s: %d executions, %d ambiguous replies, %d timeouts whose detached call a fault cut, %d detached calls logged cut at upstream.max_execution, and %d executions whose lease was live while the store was down: %d executions are explained by nothing (a lease lost while the store answered did not hold)\n%s",
						key, len(ex), unsure, cut, maxCut, downAround, rest-downAround, history(ex, replies, cl.faults))
				case rest > left:
					t.Errorf("key %s: %d executions, %d ambiguous replies, %d timeouts whose detached call a fault cut, %d detached calls logged cut at upstream.max_execution, and only %d counted lease losses or unrecorded responses left to explain the rest\n%s",
						key, len(ex), unsure, cut, maxCut, left, history(ex, replies, cl.faults))
				}
				left -= min(rest, left)
				byBudget += rest
			}
		}
		var recorded string
		for _, r := range replies {
			if r.Err != nil || r.Status/100 != 2 {
				continue
			}
			if !bodyOf(ex, r.Body) {
				t.Errorf("key %s: a client got %d %q, the body of none of its %d executions", key, r.Status, r.Body, len(ex))
			}
			if r.Replayed() {
				replays++
				if recorded == "" {
					recorded = r.Body
				} else if r.Body != recorded {
					t.Errorf("key %s: replays differ: %q and %q", key, recorded, r.Body)
				}
			}
		}
		switch f := final[key]; {
		case f.Err != nil || f.Status/100 != 2:
			t.Errorf("key %s after the faults stopped and lock_ttl passed: %s, want a replay or an execution", key, f)
		}
	}
	t.Logf("chaos check: %d keys, %d requests, %d executions, %d replays, %d 504 upstream-timeout; extra executions allowed: %d by ambiguous replies, %d by detached calls a fault cut, %d by detached calls cut at upstream.max_execution, %d by the budget of %d lost leases + %d unrecorded responses while the store was down",
		len(cl.names), requests, executions, replays, timeouts, byAmbiguity, byDetachedCut, byMaxExecution, byBudget, budget.lockLost, budget.unrecorded)
	if timeouts == 0 {
		t.Error("no request outlasted upstream.timeout: the run never detached a call")
	}
	if replays == 0 {
		t.Error("no key was replayed: no response was recorded, or no record held")
	}
}

// metricTally keeps the counters of replicas across restarts, which reset them.
type metricTally struct {
	ps    []*proxyProc
	saved leaseBudget
}

func newMetricTally(ps []*proxyProc) *metricTally { return &metricTally{ps: ps} }

// save adds p's counters before it is killed.
func (m *metricTally) save(t *testing.T, p *proxyProc) {
	t.Helper()
	m.saved.lockLost += int(metricSum(t, mLockLost, nil, p))
}

// total is the run's budget: lost leases saved before kills plus the live
// counters (a counter bumped between a save and its kill is still in the
// process's log, so the log count is a floor), and the responses the proxy
// logged it could not record because the store was down. The log has one
// line per response, where store_errors_total counts every attempt.
func (m *metricTally) total(t *testing.T) leaseBudget {
	t.Helper()
	b := m.saved
	var logLost int
	for _, p := range m.ps {
		b.lockLost += int(metricSum(t, mLockLost, nil, p))
		logs := p.Logs()
		logLost += strings.Count(logs, "lease on key lost")
		b.unrecorded += strings.Count(logs, "could not record response before its lease expired")
	}
	b.lockLost = max(b.lockLost, logLost)
	return b
}

// pidSet remembers every process a test started.
type pidSet struct{ pids []int }

func newPIDSet(pids ...int) *pidSet { return &pidSet{pids: pids} }

func (s *pidSet) add(pid int) { s.pids = append(s.pids, pid) }

// checkGone fails the test if any recorded process still exists.
func (s *pidSet) checkGone(t *testing.T) {
	t.Helper()
	for _, pid := range s.pids {
		if pid != 0 && syscall.Kill(pid, 0) == nil {
			t.Errorf("process %d still running after the run", pid)
		}
	}
}

func runtimeGoroutines() int { return runtime.NumGoroutine() }

// history renders a key's executions and replies, and the faults within
// lock_ttl of an execution, in time order, to read a failure against the
// fault timeline.
func history(ex []execution, replies []reply, faults []faultEvent) string {
	type line struct {
		at   time.Time
		text string
	}
	var lines []line
	for _, e := range ex {
		lines = append(lines, line{e.At, fmt.Sprintf("execution %d (work %v)", e.Seq, e.Work)})
	}
	for _, r := range replies {
		lines = append(lines, line{r.At, fmt.Sprintf("request to %s: %s after %v", r.Base, r, r.Took.Round(time.Millisecond))})
	}
	for _, f := range faults {
		for _, e := range ex {
			if f.at.Before(e.At.Add(e.Work+lockTTL)) && (f.until.IsZero() || f.until.After(e.At.Add(-lockTTL))) {
				lines = append(lines, line{f.at, fmt.Sprintf("fault: %s %s until %s", f.name, f.base, f.until.Format("15:04:05.000"))})
				break
			}
		}
	}
	slices.SortFunc(lines, func(a, b line) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "  %s %s\n", l.at.Format("15:04:05.000"), l.text)
	}
	return b.String()
}
