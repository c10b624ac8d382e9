package proxy

import "testing"

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
