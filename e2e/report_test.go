package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/idempotency-proxy/idempotency-proxy/internal/adoption"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

const reportToken = "report-token"

// reportCLI runs `idempotency-proxy report --admin p args...` with the token.
func reportCLI(t *testing.T, p *proxyProc, args ...string) string {
	t.Helper()
	cmd := exec.Command(proxyBin, append([]string{"report", "--admin", p.AdminURL()}, args...)...)
	cmd.Env = append(os.Environ(), "IDEMPOTENCY_PROXY_ADMIN_TOKEN="+reportToken)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	if err := cmd.Run(); err != nil {
		t.Fatalf("report %v: %v\nstderr: %s", args, err, errs.String())
	}
	return out.String()
}

// getReport is GET /admin/report?window=window, decoded.
func getReport(t *testing.T, p *proxyProc, window string) adoption.Report {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.AdminURL()+"/admin/report?window="+window, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+reportToken)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r adoption.Report
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &r) != nil {
		t.Fatalf("GET /admin/report: %d %s", resp.StatusCode, body)
	}
	return r
}

// sendTo sends body to path under key ("": none); hold makes the
// upstream hold its answer until upstream.Unhold. It may run in its own
// goroutine, so a failure is reported, not fatal.
func sendTo(t *testing.T, base, path, key, body string, hold bool) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" { // keys are not per route: each route gets its own
		req.Header.Set("Idempotency-Key", path+"-"+key)
	}
	if hold {
		req.Header.Set(hdrHold, "1")
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Errorf("POST %s key %q: %v", path, key, err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// sendMix sends to path the known mix of the report test: three new
// keys, two duplicates of the first, the second key with another body, two
// requests without a key and one body retried under a fresh key.
func sendMix(t *testing.T, base, path string) {
	t.Helper()
	send := func(key, body string) { sendTo(t, base, path, key, body, false) }
	for i := range 3 {
		send(fmt.Sprintf("new-%d", i), fmt.Sprintf(`{"n":%d}`, i))
	}
	send("new-0", `{"n":0}`)
	send("new-0", `{"n":0}`)
	send("new-1", `{"n":"another"}`)
	send("", `{"keyless":1}`)
	send("", `{"keyless":2}`)
	send("churn-a", `{"churn":1}`)
	send("churn-b", `{"churn":1}`)
}

// TestReportCountsWhatEachRouteDidOrWouldDo sends the same known mix to a
// route in shadow mode and one in enforce mode: GET /admin/report and
// `idempotency-proxy report` (JSON and table) give, per route, the
// requests, the keyed share, the duplicates and the upstream executions
// they saved (enforce) or would save (shadow), the mismatch, the
// concurrent duplicate, the missing keys and the churn, with the churning scope by hash.
func TestReportCountsWhatEachRouteDidOrWouldDo(t *testing.T) {
	up := startUpstream(t)
	cfg := baseConfig(up, "")
	cfg.Memory = true
	cfg.Env = []string{"IDEMPOTENCY_PROXY_ADMIN_TOKEN=" + reportToken}
	cfg.Routes = []routeConfig{
		{Match: "POST /v1/charges", Keys: map[string]string{"mode": "shadow", "require_key": "true"}},
		{Match: "POST /v1/orders", Keys: map[string]string{"require_key": "true"}},
	}
	p := startProxy(t, "report", cfg)
	sendMix(t, p.URL(), "/v1/charges")
	sendMix(t, p.URL(), "/v1/orders")
	// A duplicate sent while the first runs, on each route.
	var held sync.WaitGroup
	for _, path := range []string{"/v1/charges", "/v1/orders"} {
		held.Go(func() { sendTo(t, p.URL(), path, "held", `{"held":1}`, true) })
		up.WaitCount(path+"-held", 1, 30*time.Second)
		sendTo(t, p.URL(), path, "held", `{"held":1}`, false)
	}
	up.Unhold()
	held.Wait()

	r := getReport(t, p, "1h")
	byRoute := map[string]adoption.Route{}
	for _, rt := range r.Routes {
		byRoute[rt.Route] = rt
	}
	for _, tc := range []struct {
		route, mode            string
		saved, wouldSave       uint64
		tableSaved, tableWould string
	}{
		{"POST /v1/charges", "shadow", 0, 2, "0", "2"},
		{"POST /v1/orders", "enforce", 2, 0, "2", "0"},
	} {
		got := byRoute[tc.route]
		want := adoption.Route{
			Route: tc.route, Mode: tc.mode, Requests: 12, Keyed: 10, KeyedShare: 10.0 / 12,
			Duplicates: 2, ExecutionsSaved: tc.saved, ExecutionsWouldBe: tc.wouldSave,
			Mismatches: 1, Conflicts: 1, MissingKeys: 2, Churn: 1,
		}
		if len(got.TopChurnScopes) != 1 || got.TopChurnScopes[0].Churn != 1 || len(got.TopChurnScopes[0].ScopeHash) != 32 {
			t.Errorf("%s: top churn scopes %+v, want the one scope with 1, by its 32-digit scope_hash", tc.route, got.TopChurnScopes)
		}
		scopes := got.TopChurnScopes
		got.TopChurnScopes = nil
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: report\n%+v\nwant\n%+v", tc.route, got, want)
		}
		table := reportCLI(t, p, "--window", "1h")
		row := strings.Join([]string{tc.route, tc.mode, "12", "10", "(83%)", "2", tc.tableSaved, tc.tableWould, "1", "1", "2", "1"}, " ")
		if !containsFields(table, row) {
			t.Errorf("report table has no row %q:\n%s", row, table)
		}
		if len(scopes) == 1 && !containsFields(table, tc.route+" "+scopes[0].ScopeHash+" 1") {
			t.Errorf("report table does not name the churning scope %s of %s:\n%s", scopes[0].ScopeHash, tc.route, table)
		}
	}

	var fromCLI adoption.Report
	if err := json.Unmarshal([]byte(reportCLI(t, p, "--window", "1h", "--json")), &fromCLI); err != nil {
		t.Fatalf("report --json: %v", err)
	}
	if fmt.Sprint(fromCLI.Routes) != fmt.Sprint(r.Routes) {
		t.Errorf("report --json routes\n%+v\nwant those of GET /admin/report\n%+v", fromCLI.Routes, r.Routes)
	}
	if long := getReport(t, p, "48h"); long.Note == "" || long.Covered == "48h0m0s" {
		t.Errorf("a 48h window of a proxy just started: covered %s, note %q; want what is kept and a note saying so", long.Covered, long.Note)
	}
}

// containsFields reports whether a line of text has the fields of want,
// whitespace aside.
func containsFields(text, want string) bool {
	w := strings.Join(strings.Fields(want), " ")
	for _, line := range strings.Split(text, "\n") {
		if strings.Join(strings.Fields(line), " ") == w {
			return true
		}
	}
	return false
}
