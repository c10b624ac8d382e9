package proxy

import (
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/idempotency-proxy/idempotency-proxy/internal/adoption"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// reportT0 is a minute boundary, so that tests know which bucket a time falls in.
var reportT0 = time.Unix(1_800_000_000/60*60, 0)

func TestReportSumsOnlyTheMinutesOfTheWindow(t *testing.T) {
	c := newReportCounts(reportT0)
	for i := range 10 { // one request a minute for ten minutes
		c.add(reportT0.Add(time.Duration(i)*time.Minute+30*time.Second), fieldRequests)
	}
	now := unixMinute(reportT0) + 9
	for _, tc := range []struct{ minutes, want int64 }{{1, 1}, {3, 3}, {10, 10}, {60, 10}} {
		if got := c.sum(now-tc.minutes+1, now)[fieldRequests]; int64(got) != tc.want {
			t.Errorf("last %d minutes: %d requests, want %d", tc.minutes, got, tc.want)
		}
	}
}

func TestReportBucketADayLaterForgetsTheDayBefore(t *testing.T) {
	c := newReportCounts(reportT0)
	c.add(reportT0, fieldRequests)
	c.add(reportT0, fieldRequests)
	later := reportT0.Add(ReportKept) // the same slot, a day later
	c.add(later, fieldRequests)
	m := unixMinute(later)
	if got := c.sum(m, m)[fieldRequests]; got != 1 {
		t.Errorf("the reused bucket holds %d requests, want 1: the day before was kept", got)
	}
	if got := c.sum(m-int64(reportSlots)+1, m)[fieldRequests]; got != 1 {
		t.Errorf("the whole day holds %d requests, want 1", got)
	}
}

func TestReportLineAddsEnforceAndShadowAnswers(t *testing.T) {
	c := newReportCounts(reportT0)
	for range 4 {
		c.outcome(reportT0, OutcomeExecuted, true)
	}
	c.outcome(reportT0, OutcomeReplayed, true)
	c.outcome(reportT0, OutcomeReplayed, true)
	c.outcome(reportT0, OutcomeMismatch, true)
	c.outcome(reportT0, OutcomeConflict, true)
	c.outcome(reportT0, OutcomeMissingKey, false)
	c.outcome(reportT0, OutcomeNoKey, false)
	c.outcome(reportT0, OutcomePassthrough, false) // a GET: not protected
	// Shadow: forwarded (passthrough) and counted as what enforce would do.
	for _, w := range []Would{WouldReplay, WouldReplay, WouldReplay, WouldMismatch, WouldMissingKey} {
		c.outcome(reportT0, OutcomePassthrough, w != WouldMissingKey)
		c.would(reportT0, w)
	}
	c.churned(reportT0, [16]byte{1})
	m := unixMinute(reportT0)
	got := c.line("POST /v1/charges", "enforce", m, m)
	want := adoption.Route{
		Route: "POST /v1/charges", Mode: "enforce",
		Requests: 16, Keyed: 12, KeyedShare: 12.0 / 15,
		Duplicates: 5, ExecutionsSaved: 2, ExecutionsWouldBe: 3,
		Mismatches: 2, Conflicts: 1, MissingKeys: 3, Churn: 1,
	}
	if len(got.TopChurnScopes) != 1 || got.TopChurnScopes[0].Churn != 1 {
		t.Errorf("top churn scopes %+v, want the one scope once", got.TopChurnScopes)
	}
	got.TopChurnScopes = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("line =\n%+v\nwant\n%+v", got, want)
	}
}

func TestReportNamesTheMostChurningScopesInBoundedMemory(t *testing.T) {
	c := newReportCounts(reportT0)
	heavy := [16]byte{0xff, 0xee}
	for i := range 3 * reportTrackedScopes {
		c.churned(reportT0, [16]byte{byte(i), byte(i >> 8), 1})
		if i%10 == 0 {
			c.churned(reportT0, heavy)
		}
	}
	if len(c.scopes) > reportTrackedScopes {
		t.Fatalf("%d scopes held, want at most %d", len(c.scopes), reportTrackedScopes)
	}
	top := c.topScopes()
	if len(top) != reportTopScopes {
		t.Fatalf("%d top scopes, want %d", len(top), reportTopScopes)
	}
	if top[0].ScopeHash != "ffee"+strings.Repeat("0", 28) {
		t.Errorf("top scope %s, want the heavy one ffee0…: %+v", top[0].ScopeHash, top)
	}
	for i := 1; i < len(top); i++ {
		if top[i].Churn > top[i-1].Churn {
			t.Errorf("top scopes out of order: %+v", top)
		}
	}
}

// A route's report counts take what docs/operating.md says, about 100 KiB:
// reportSlots buckets of reportBucketBytes, the size of one.
func TestReportCountsOfARouteTakeAbout100KiB(t *testing.T) {
	if got := int(unsafe.Sizeof(reportBucket{})); got != reportBucketBytes {
		t.Errorf("a bucket takes %d bytes, reportBucketBytes says %d", got, reportBucketBytes)
	}
	if got := int(unsafe.Sizeof(reportCounts{}.slots)); got != reportSlots*reportBucketBytes || got < 95<<10 || got > 105<<10 {
		t.Errorf("a route's buckets take %d bytes, want reportSlots×reportBucketBytes (%d), about 100 KiB", got, reportSlots*reportBucketBytes)
	}
}

func TestReportWindowLongerThanKeptSaysSo(t *testing.T) {
	h := newKeyHashHandler(t, nil)
	now := h.metrics.reportsStart
	r := h.reportAt(now.Add(3*time.Minute), 10*time.Minute)
	if r.Covered != "4m0s" || !strings.Contains(r.Note, "started") {
		t.Errorf("a window longer than the process has run: covered %s, note %q; want 4m0s and a note", r.Covered, r.Note)
	}
	r = h.reportAt(now.Add(48*time.Hour), 72*time.Hour)
	if r.Covered != ReportKept.String() || !strings.Contains(r.Note, "keeps") {
		t.Errorf("a window longer than what is kept: covered %s, note %q; want %s and a note", r.Covered, r.Note, ReportKept)
	}
	r = h.reportAt(now.Add(48*time.Hour), time.Hour)
	if r.Covered != "1h0m0s" || r.Note != "" {
		t.Errorf("a window within what is kept: covered %s, note %q; want 1h0m0s, no note", r.Covered, r.Note)
	}
	if len(r.Routes) != 1 || r.Routes[0].Route != defaultRoute {
		t.Errorf("routes %v, want the defaults' alone", fmt.Sprint(r.Routes))
	}
}

// A report covers the whole minutes of its window up to now, says from
// when, and a route that saw no protected request reports a keyed share of
// 0, not a division by nothing.
func TestReportCoversTheLastMinutesOfItsWindow(t *testing.T) {
	h := newKeyHashHandler(t, nil)
	start := h.metrics.reportsStart
	c := h.routes.Load().fallback.metrics.report
	for i := range 10 { // one unprotected request a minute for ten minutes
		c.outcome(start.Add(time.Duration(i)*time.Minute), OutcomePassthrough, false)
	}
	now := start.Add(9 * time.Minute)
	r := h.reportAt(now, 3*time.Minute)
	wantSince := time.Unix((unixMinute(now)-2)*60, 0).UTC()
	if !r.Since.Equal(wantSince) || r.Covered != "3m0s" {
		t.Errorf("since %v, covered %s; want %v, 3m0s", r.Since, r.Covered, wantSince)
	}
	if len(r.Routes) != 1 || r.Routes[0].Requests != 3 || r.Routes[0].KeyedShare != 0 {
		t.Fatalf("routes %+v, want the defaults' with 3 requests and a keyed share of 0", r.Routes)
	}
}

// BenchmarkReportOutcome is what the report adds to each request.
func BenchmarkReportOutcome(b *testing.B) {
	c := newReportCounts(time.Now())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		now := time.Now()
		for pb.Next() {
			c.outcome(now, OutcomeReplayed, true)
		}
	})
}

// A request served counts in its route's report, as keyed when it carried
// an idempotency key.
func TestReportCountsAsKeyedTheRequestsThatCarryAKey(t *testing.T) {
	e := newEnv(t, nil)
	e.do(t, "POST", "/x", "k-1", `{}`)
	e.do(t, "POST", "/x", "k-1", `{}`) // replayed
	e.do(t, "POST", "/x", "", `{}`)    // forwarded without a key
	// Each is counted once it is answered.
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		r := e.handler.Report(time.Hour)
		if len(r.Routes) != 1 || r.Routes[0].Route != defaultRoute {
			return fmt.Errorf("report routes %+v, want the default route alone", r.Routes)
		}
		if got := r.Routes[0]; got.Requests != 3 || got.Keyed != 2 {
			return fmt.Errorf("report counts %d requests, %d keyed; want 3, 2 keyed", got.Requests, got.Keyed)
		}
		return nil
	})
}

// Two requests that find a minute's bucket a day old at once both ask to
// renew it: the second renewal finds it renewed and keeps what the first
// minute's requests have counted since.
func TestReportBucketRenewedOnceForItsMinute(t *testing.T) {
	c := newReportCounts(reportT0)
	m := unixMinute(reportT0)
	b := &c.slots[m%int64(reportSlots)]
	c.reuse(b, m)
	b.n[fieldRequests].Add(1)
	c.reuse(b, m) // the racing request's renewal, late
	if got := c.sum(m, m)[fieldRequests]; got != 1 {
		t.Errorf("the bucket holds %d requests after a second renewal for its minute, want 1", got)
	}
}

// However long the window asked, even the longest duration there is, a
// report longer than what is kept covers what is kept and says so.
func TestReportOfTheLongestWindowSaysItIsLongerThanKept(t *testing.T) {
	h := newKeyHashHandler(t, nil)
	now := h.metrics.reportsStart.Add(48 * time.Hour)
	for _, window := range []time.Duration{math.MaxInt64, math.MaxInt64 - time.Second, 25 * time.Hour} {
		r := h.reportAt(now, window)
		if r.Covered != ReportKept.String() || !strings.Contains(r.Note, "keeps") {
			t.Errorf("window %s: covered %s, note %q; want %s and a note", window, r.Covered, r.Note, ReportKept)
		}
	}
}

// reportOfSequence sends, under mode and concurrent: wait, a new key, a
// duplicate of it while the first is held upstream, a retry once it is
// recorded, the key with another payload and a request without a key, and
// returns the route's report line once all five are counted.
func reportOfSequence(t *testing.T, mode Mode) adoption.Route {
	t.Helper()
	arrived, release := make(chan struct{}, 8), make(chan struct{})
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		if r.Header.Get("X-Hold") == "1" {
			<-release
		}
		w.WriteHeader(http.StatusCreated)
	}, withPolicy(func(p *Policy) {
		p.Mode, p.RequireKey, p.Concurrent, p.WaitTimeout = mode, true, ConcurrentWait, time.Hour
	}))
	unhold := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unhold)
	first, dup := make(chan *response, 1), make(chan *response, 1)
	go func() { first <- e.do(t, "POST", "/x", "k", `{"n":1}`, "X-Hold", "1") }()
	<-arrived
	go func() { dup <- e.do(t, "POST", "/x", "k", `{"n":1}`) }()
	if mode == ModeShadow {
		<-arrived // forwarded at once
	} else {
		gaugeIs(t, "the in-flight gauge (the duplicate waiting)", e.handler.metrics.inflight, 2)
	}
	unhold()
	<-first
	<-dup
	e.do(t, "POST", "/x", "k", `{"n":1}`) // a retry of the recorded key
	e.do(t, "POST", "/x", "k", `{"n":2}`) // another payload
	e.do(t, "POST", "/x", "", `{"n":3}`)  // no key
	var line adoption.Route
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		line = e.handler.Report(time.Hour).Routes[0]
		if line.Requests != 5 {
			return fmt.Errorf("%d requests counted, want 5", line.Requests)
		}
		return nil
	})
	return line
}

// The adoption report exists to predict enforce from shadow: the same
// traffic, a duplicate that enforce makes wait for its first request's
// answer included, gives the same counts under either mode but for the
// executions saved, which shadow counts as would-be.
func TestReportCountsTheSameTrafficAlikeInShadowAndEnforce(t *testing.T) {
	enforce, shadow := reportOfSequence(t, ModeEnforce), reportOfSequence(t, ModeShadow)
	if enforce.ExecutionsSaved != 2 || enforce.ExecutionsWouldBe != 0 {
		t.Errorf("enforce: %d executions saved, %d would be; want 2, 0", enforce.ExecutionsSaved, enforce.ExecutionsWouldBe)
	}
	if shadow.ExecutionsSaved != 0 || shadow.ExecutionsWouldBe != 2 {
		t.Errorf("shadow: %d executions saved, %d would be; want 0, 2", shadow.ExecutionsSaved, shadow.ExecutionsWouldBe)
	}
	for _, l := range []*adoption.Route{&enforce, &shadow} {
		l.Mode, l.ExecutionsSaved, l.ExecutionsWouldBe = "", 0, 0
	}
	if !reflect.DeepEqual(enforce, shadow) {
		t.Errorf("the same traffic reported\nunder enforce %+v\nunder shadow  %+v", enforce, shadow)
	}
}

// A reload that removes a route drops its report counts, about 100 KiB
// each, so that routes renamed reload after reload do not add up; the
// routes it keeps keep theirs, and a route added back starts from zero.
func TestReportCountsOfARouteRemovedByAReloadAreDropped(t *testing.T) {
	e := newEnv(t, nil)
	routes := func(patterns ...string) {
		t.Helper()
		var rs []Route
		for _, p := range patterns {
			rs = append(rs, Route{Pattern: p, Policy: DefaultPolicy()})
		}
		if err := e.handler.SetRoutes(DefaultPolicy(), rs); err != nil {
			t.Fatal(err)
		}
	}
	requests := func(label string) uint64 {
		for _, l := range e.handler.Report(time.Hour).Routes {
			if l.Route == label {
				return l.Requests
			}
		}
		return 0
	}
	routes("POST /kept", "POST /removed")
	e.do(t, "POST", "/kept", "k-1", `{}`)
	e.do(t, "POST", "/removed", "k-2", `{}`)
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if k, r := requests("POST /kept"), requests("POST /removed"); k != 1 || r != 1 {
			return fmt.Errorf("%d and %d requests counted, want 1 each", k, r)
		}
		return nil
	})
	for i := range 100 { // a route renamed reload after reload
		routes("POST /kept", fmt.Sprintf("POST /renamed-%d", i))
	}
	routes("POST /kept", "POST /removed")
	if got := requests("POST /kept"); got != 1 {
		t.Errorf("the kept route reports %d requests after the reloads, want its 1", got)
	}
	if got := requests("POST /removed"); got != 0 {
		t.Errorf("the route added back reports %d requests, want 0: its counts were dropped with it", got)
	}
	e.handler.metrics.reportsMu.Lock()
	held := len(e.handler.metrics.reports)
	e.handler.metrics.reportsMu.Unlock()
	if held != 3 {
		t.Errorf("report counts of %d routes held, want 3: the defaults', the kept one's and the one added back", held)
	}
}
