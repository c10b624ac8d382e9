package proxy

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Every outcome is timed under the result docs/operating.md gives it: the
// time a replay, an execution, an unprotected forward and a refusal take
// are told apart, the outcomes within each are not.
func TestEveryOutcomeIsTimedUnderItsResult(t *testing.T) {
	want := map[Outcome]Result{
		OutcomeReplayed: ResultReplayed,
		OutcomeExecuted: ResultExecuted, OutcomeReleased: ResultExecuted, OutcomeUpstreamError: ResultExecuted, OutcomeUpstreamTimeout: ResultExecuted,
		OutcomeReconciledFound: ResultExecuted, OutcomeReconciledAbsent: ResultExecuted, OutcomeReconcileGaveUp: ResultExecuted,
		OutcomePassthrough: ResultForwarded, OutcomeNoKey: ResultForwarded, OutcomeStoreBypassed: ResultForwarded,
	}
	for _, o := range Outcomes() {
		w, ok := want[o]
		if !ok {
			w = ResultRefused
		}
		if got := ResultOf(o); got != w {
			t.Errorf("ResultOf(%s) = %s, want %s", o, got, w)
		}
	}
}

// A readiness ping of the store is timed and counted as the request path's
// store operations are, under operation "ping", a failed one as an error
// (docs/operating.md).
func TestStorePingIsTimedAndItsFailureCounted(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry(), "test")
	for i, err := range []error{nil, nil, store.ErrUnavailable} {
		m.ObservePing(2*time.Millisecond, err)
		if got, want := testutil.ToFloat64(m.storeErrors.WithLabelValues("ping")), float64(i/2); got != want {
			t.Errorf("after ping %d (%v): ping errors = %v, want %v", i+1, err, got, want)
		}
	}
	var h dto.Metric
	if err := m.storeDuration.WithLabelValues("ping").(prometheus.Histogram).Write(&h); err != nil {
		t.Fatal(err)
	}
	if got := h.GetHistogram().GetSampleCount(); got != 3 {
		t.Errorf("pings timed = %d, want 3", got)
	}
	if got := testutil.ToFloat64(m.storeErrors.WithLabelValues("begin")); got != 0 {
		t.Errorf("begin errors = %v, want 0: a ping is not a request's operation", got)
	}
}
