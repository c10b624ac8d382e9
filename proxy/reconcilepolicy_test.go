package proxy

import (
	"reflect"
	"testing"
	"time"
)

// The statuses and durations of ambiguous_statuses and the reconcile block
// are refused exactly past the edges docs/configuration.md gives them, and
// each problem names its own key.
func TestReconcileBlockIsCheckedAtTheEdgesOfItsRanges(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(p *Policy)
		want []string // the problems' keys
	}{
		{"statuses 100 and 599", func(p *Policy) {
			p.AmbiguousStatuses = []int{100, 599}
			p.Reconcile.Found, p.Reconcile.Absent = []int{100, 599}, []int{404}
		}, nil},
		{"ambiguous status 99", func(p *Policy) { p.AmbiguousStatuses = []int{99} }, []string{"ambiguous_statuses[0]"}},
		{"ambiguous status 600", func(p *Policy) { p.AmbiguousStatuses = []int{600} }, []string{"ambiguous_statuses[0]"}},
		{"found status 99", func(p *Policy) { p.Reconcile.Found = []int{200, 99} }, []string{"reconcile.found[1]"}},
		{"absent status 600", func(p *Policy) { p.Reconcile.Absent = []int{600} }, []string{"reconcile.absent[0]"}},
		{"found_status 0, the probe's own", func(p *Policy) { p.Reconcile.FoundStatus = 0 }, nil},
		{"found_status 200", func(p *Policy) { p.Reconcile.FoundStatus = 200 }, nil},
		{"found_status 599", func(p *Policy) { p.Reconcile.FoundStatus = 599 }, nil},
		{"found_status 199", func(p *Policy) { p.Reconcile.FoundStatus = 199 }, []string{"reconcile.found_status"}},
		{"found_status 600", func(p *Policy) { p.Reconcile.FoundStatus = 600 }, []string{"reconcile.found_status"}},
		{"durations of a nanosecond", func(p *Policy) {
			p.Reconcile.After, p.Reconcile.Every, p.Reconcile.For = time.Nanosecond, time.Nanosecond, time.Nanosecond
		}, nil},
		{"after as long as for", func(p *Policy) { p.Reconcile.After = p.Reconcile.For }, nil},
		{"after past for", func(p *Policy) { p.Reconcile.After = p.Reconcile.For + time.Nanosecond }, []string{"reconcile.after"}},
		{"durations of zero", func(p *Policy) {
			p.Reconcile.After, p.Reconcile.Every, p.Reconcile.For = 0, 0, 0
		}, []string{"reconcile.after", "reconcile.every", "reconcile.for"}},
		{"for of zero is its own problem only", func(p *Policy) { p.Reconcile.For = 0 }, []string{"reconcile.for"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultPolicy()
			p.OnUpstreamError = UpstreamErrorReconcile
			p.Reconcile.Request = "GET /v1/charges?idempotency_key={key}"
			tc.set(&p)
			var got []string
			for _, pr := range p.Check(nil) {
				got = append(got, pr.Key)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("problems at %q, want %q: %v", got, tc.want, p.Check(nil))
			}
		})
	}
}
