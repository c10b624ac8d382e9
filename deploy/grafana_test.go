package deploy_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

const dashboardFile = "grafana/idempotency-proxy.json"

type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type variable struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Query any    `json:"query"` // a string or an object, by Grafana version
}

type panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // collapsed rows hold their panels
}

// queries returns every panel's queries, keyed "panel title #n".
func (d dashboard) queries() map[string]string {
	out := map[string]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for i, tgt := range p.Targets {
				out[p.Title+" #"+string(rune('A'+i))] = tgt.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

func TestDashboard(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q: both are needed to import and link the dashboard", d.Title, d.UID)
	}

	fams := exposedFamilies(t)
	queries := d.queries()
	if len(queries) == 0 {
		t.Fatal("dashboard has no queries")
	}
	used := map[string]bool{}
	for where, expr := range queries {
		if strings.TrimSpace(expr) == "" {
			t.Errorf("%s: empty query", where)
		}
		for _, name := range checkMetricNames(t, where, expr, fams) {
			used[name] = true
		}
		checkOutcomes(t, where, expr)
		// Per-route series follow the route selector, so the variable works
		// on every panel it could apply to.
		if strings.Contains(expr, `route`) && strings.Contains(expr, "idempotency_proxy_") && !strings.Contains(expr, `route=~"$route"`) {
			t.Errorf("%s: query uses route but not route=~\"$route\": %s", where, expr)
		}
	}

	// One panel at least for every metric documented in docs/operating.md#metrics.
	for name := range fams {
		if strings.HasPrefix(name, "idempotency_proxy_") && !used[name] {
			t.Errorf("no panel shows %s", name)
		}
	}

	i := slices.IndexFunc(d.Templating.List, func(v variable) bool { return v.Name == "route" })
	if i < 0 {
		t.Fatal("no route template variable")
	}
	q, _ := json.Marshal(d.Templating.List[i].Query)
	if !strings.Contains(string(q), "label_values(idempotency_proxy_requests_total, route)") {
		t.Errorf("route variable query = %s, want label_values(idempotency_proxy_requests_total, route)", q)
	}
}
