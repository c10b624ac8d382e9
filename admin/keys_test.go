package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

var (
	created = time.Date(2026, 11, 30, 9, 0, 0, 123e6, time.UTC)
	expires = created.Add(24 * time.Hour)
)

func completedEntry(key string) store.Entry {
	return store.Entry{
		Key: key, State: store.Completed, ExpiresAt: expires, BodyBytes: 11,
		Record: &store.Record{
			Status: 201, CreatedAt: created,
			Header: map[string][]string{"Content-Type": {"application/json"}},
			Body:   []byte(`{"id":"c1"}`),
		},
	}
}

func leaseEntry(key string) store.Entry {
	return store.Entry{Key: key, State: store.InFlight, ExpiresAt: expires}
}

func TestGetKeyAnswersTheDocumentedShape(t *testing.T) {
	e := newEnv(t, testToken)
	e.st.entries["aa01"] = completedEntry("aa01")
	e.st.entries["bb02"] = leaseEntry("bb02")
	held := leaseEntry("cc03")
	held.Lease = store.Lease{
		Request: store.Request{
			Method: "POST", Host: "billing.example", Path: "/v1/charges", Route: "POST /v1/charges", StartedAt: created,
		},
		Instance: "proxy-0/7", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
	}
	e.st.entries["cc03"] = held
	call := completedEntry("dd04")
	call.Record.Header = map[string][]string{"Content-Type": {"application/grpc"}}
	call.Record.Trailer = map[string][]string{"Grpc-Status": {"9"}, "Grpc-Message": {"declined"}}
	call.Record.Request = store.Request{Method: "POST", Path: "/bank.Ledger/Charge"}
	e.st.entries["dd04"] = call
	for _, tc := range []struct{ key, want string }{
		{"dd04", `{"key_hash":"dd04","state":"completed","expires_at":"2026-12-01T09:00:00.123Z",` +
			`"method":"POST","path":"/bank.Ledger/Charge",` +
			`"created_at":"2026-11-30T09:00:00.123Z","status":201,"headers":{"Content-Type":["application/grpc"]},` +
			`"trailers":{"Grpc-Message":["declined"],"Grpc-Status":["9"]},` +
			`"body_bytes":11,"grpc":{"method":"/bank.Ledger/Charge","status":"FAILED_PRECONDITION"},"body_omitted":false}`},
		{"aa01", `{"key_hash":"aa01","state":"completed","expires_at":"2026-12-01T09:00:00.123Z",` +
			`"created_at":"2026-11-30T09:00:00.123Z","status":201,"headers":{"Content-Type":["application/json"]},` +
			`"body_bytes":11,"body_omitted":false}`},
		{"bb02", `{"key_hash":"bb02","state":"in_flight","expires_at":"2026-12-01T09:00:00.123Z"}`},
		{"cc03", `{"key_hash":"cc03","state":"in_flight","expires_at":"2026-12-01T09:00:00.123Z",` +
			`"method":"POST","host":"billing.example","path":"/v1/charges","route":"POST /v1/charges",` +
			`"started_at":"2026-11-30T09:00:00.123Z","instance":"proxy-0/7","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"}`},
	} {
		rec := e.do(t, "GET", "/admin/keys/"+tc.key, bearer, "")
		if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != tc.want {
			t.Errorf("GET %s = %d %s\nwant 200 %s", tc.key, rec.Code, rec.Body.String(), tc.want)
		}
	}
	if got := e.ops(opGet, resultOK); got != 4 {
		t.Errorf("get ok counted %v, want 4", got)
	}
}

func TestAbsentKeyIsKeyNotFound(t *testing.T) {
	e := newEnv(t, testToken)
	for _, method := range []string{"GET", "DELETE"} {
		rec := e.do(t, method, "/admin/keys/abcdef", bearer, "")
		if rec.Code != http.StatusNotFound {
			t.Fatalf("%s absent key = %d, want 404", method, rec.Code)
		}
		if p := problemOf(t, rec); p.Type != "https://idempotency-proxy.dev/problems/key-not-found" {
			t.Errorf("%s: problem type %q, want key-not-found", method, p.Type)
		}
	}
	if got := e.ops(opDelete, resultNotFound); got != 1 {
		t.Errorf("delete not_found counted %v, want 1", got)
	}
}

func TestDeleteRemovesTheKeyAndIsLoggedAtWarn(t *testing.T) {
	e := newEnv(t, testToken)
	e.st.entries["cc03"] = leaseEntry("cc03")
	rec := e.do(t, "DELETE", "/admin/keys/cc03", bearer, "")
	if rec.Code != http.StatusNoContent || rec.Body.Len() != 0 {
		t.Fatalf("DELETE = %d %q, want 204 and no body", rec.Code, rec.Body.String())
	}
	if _, ok := e.st.entries["cc03"]; ok {
		t.Error("the key is still in the store")
	}
	var line map[string]any
	if err := json.Unmarshal(e.logs.Bytes(), &line); err != nil {
		t.Fatalf("log %q: %v", e.logs.String(), err)
	}
	if line["level"] != "WARN" || line["key_hash"] != "cc03" {
		t.Errorf("log line %v, want level WARN with key_hash cc03", line)
	}
}

func TestMalformedAdminRequestsAre400(t *testing.T) {
	e := newEnv(t, testToken, func(o *Options) { o.Hasher = fakeHasher{} })
	for _, c := range []struct{ method, target, body string }{
		{"GET", "/admin/keys/ABCDEF", ""},
		{"GET", "/admin/keys/not-hex", ""},
		{"DELETE", "/admin/keys/" + strings.Repeat("a", 129), ""},
		{"GET", "/admin/keys?state=done", ""},
		{"GET", "/admin/keys?limit=0", ""},
		{"GET", "/admin/keys?limit=1001", ""},
		{"GET", "/admin/keys?limit=ten", ""},
		{"GET", "/admin/keys?cursor=bogus", ""},
		{"POST", "/admin/hash", `not json`},
		{"POST", "/admin/hash", `{"method":"POST"}`},
		{"POST", "/admin/hash", `{"key":"k","bodyy":"x"}`},
		{"POST", "/admin/hash", `{"key":"k","path":"http://elsewhere/x"}`},
		{"POST", "/admin/hash", `{"key":"refuse"}`},
	} {
		rec := e.do(t, c.method, c.target, bearer, c.body)
		if rec.Code != http.StatusBadRequest {
			t.Errorf("%s %s %s = %d, want 400", c.method, c.target, c.body, rec.Code)
			continue
		}
		if p := problemOf(t, rec); p.Type != probBadRequest.Type || p.Detail == "" {
			t.Errorf("%s %s: problem %+v, want %s with a detail", c.method, c.target, p, probBadRequest.Type)
		}
	}
}

func TestListPassesStateLimitAndCursor(t *testing.T) {
	e := newEnv(t, testToken)
	e.st.entries["aa01"] = completedEntry("aa01")
	e.st.entries["bb02"] = leaseEntry("bb02")
	e.st.next = "page2"
	for _, tc := range []struct {
		query string
		want  []any
		keys  int
	}{
		{"", []any{store.State(0), "", 100}, 2},
		{"?state=all&limit=1000", []any{store.State(0), "", 1000}, 2},
		{"?state=in_flight&limit=5&cursor=c1", []any{store.InFlight, "c1", 5}, 1},
		{"?state=completed", []any{store.Completed, "", 100}, 1},
	} {
		rec := e.do(t, "GET", "/admin/keys"+tc.query, bearer, "")
		if rec.Code != http.StatusOK {
			t.Fatalf("list%s = %d %s", tc.query, rec.Code, rec.Body.String())
		}
		var out listJSON
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(e.st.listArgs) != fmt.Sprint(tc.want) || len(out.Keys) != tc.keys || out.NextCursor != "page2" {
			t.Errorf("list%s: store got %v, answer %+v; want %v, %d keys, next_cursor page2", tc.query, e.st.listArgs, out, tc.want, tc.keys)
		}
	}
	// An empty page is [] on the wire, not null.
	e.st.entries = map[string]store.Entry{}
	e.st.next = ""
	if rec := e.do(t, "GET", "/admin/keys", bearer, ""); strings.TrimSpace(rec.Body.String()) != `{"keys":[],"next_cursor":""}` {
		t.Errorf("empty list = %s", rec.Body.String())
	}
}

func TestListShowsKeysNotTheirMarkersOrReleasedNotes(t *testing.T) {
	e := newEnv(t, testToken)
	e.st.entries["aa01"] = completedEntry("aa01")
	e.st.entries["aa01"+store.ReconcileSuffix] = completedEntry("aa01" + store.ReconcileSuffix)
	e.st.entries["bb02"+store.ReleasedSuffix] = completedEntry("bb02" + store.ReleasedSuffix)
	rec := e.do(t, "GET", "/admin/keys", bearer, "")
	var out listJSON
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Keys) != 1 || out.Keys[0].KeyHash != "aa01" {
		t.Errorf("list = %s, want key aa01 alone", rec.Body.String())
	}
}

// The operator sees why the store failed, not only that it did.
func TestStoreFailureShowsTheCause(t *testing.T) {
	e := newEnv(t, testToken)
	e.st.opErr = fmt.Errorf("inspect: %w: dial tcp 127.0.0.1:6390: connect: connection refused", store.ErrUnavailable)
	rec := e.do(t, "GET", "/admin/keys/aa01", bearer, "")
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", rec.Code)
	}
	if p := problemOf(t, rec); !strings.Contains(p.Detail, "connection refused") {
		t.Errorf("detail %q does not carry the cause", p.Detail)
	}
	e.st.opErr = errors.New("something else")
	if rec := e.do(t, "DELETE", "/admin/keys/aa01", bearer, ""); rec.Code != http.StatusInternalServerError {
		t.Errorf("unknown store error: %d, want 500", rec.Code)
	}
	if got := e.ops(opDelete, resultError); got != 1 {
		t.Errorf("delete error counted %v, want 1", got)
	}
}

// A store without operator methods answers 501, never a panic.
func TestStoreWithoutKeyAPIAnswers501(t *testing.T) {
	e := newEnv(t, testToken, func(o *Options) { o.Store = pingOnly{} })
	for _, c := range apiCalls[:4] {
		if rec := e.do(t, c.method, c.target, bearer, c.body); rec.Code != http.StatusNotImplemented {
			t.Errorf("%s %s = %d, want 501", c.method, c.target, rec.Code)
		}
	}
}

// fakeHasher echoes the request it was asked about; the key "refuse" is an error.
type fakeHasher struct{}

func (fakeHasher) KeyHashFrom(r *http.Request, key, source string) (string, error) {
	if key == "refuse" {
		return "", errors.New("not protected")
	}
	return strings.Join([]string{r.Method, r.Host, r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization"), key}, "|"), nil
}

func TestHashBuildsTheRequestItIsAskedAbout(t *testing.T) {
	e := newEnv(t, testToken, func(o *Options) { o.Hasher = fakeHasher{} })
	for _, tc := range []struct{ body, want string }{
		{`{"key":"k1","method":"put","host":"api.example","path":"/v1/x?a=1","headers":{"authorization":"Bearer c"}}`,
			"PUT|api.example|/v1/x|a=1|Bearer c|k1"},
		{`{"key":"k2"}`, "POST||/|||k2"},
	} {
		rec := e.do(t, "POST", "/admin/hash", bearer, tc.body)
		var out map[string]string
		json.Unmarshal(rec.Body.Bytes(), &out)
		if rec.Code != http.StatusOK || out["key_hash"] != tc.want {
			t.Errorf("hash %s = %d %s, want key_hash %q", tc.body, rec.Code, rec.Body.String(), tc.want)
		}
	}
}

// A deleted key is new: the marker of a settlement of its outcome goes
// with it, or the next request with the key would be looked up, not run.
func TestDeleteRemovesTheKeysSettlementMarker(t *testing.T) {
	e := newEnv(t, testToken)
	e.st.entries["cc03"] = leaseEntry("cc03")
	e.st.entries["cc03"+store.ReconcileSuffix] = completedEntry("cc03" + store.ReconcileSuffix)
	if rec := e.do(t, "DELETE", "/admin/keys/cc03", bearer, ""); rec.Code != http.StatusNoContent {
		t.Fatalf("DELETE = %d %q, want 204", rec.Code, rec.Body.String())
	}
	if _, ok := e.st.entries["cc03"+store.ReconcileSuffix]; ok {
		t.Error("the key's marker is still in the store")
	}
}

// A key in flight shows settling only when its marker says its outcome is
// being settled: a marker written before the request was sent, its outcome
// still pending, leaves the key plainly in flight.
func TestKeyShowsSettlingOnlyOnceItsOutcomeIsUnknown(t *testing.T) {
	e := newEnv(t, testToken)
	e.st.entries["aa01"] = leaseEntry("aa01")
	e.st.entries["aa01"+store.ReconcileSuffix] = completedEntry("aa01" + store.ReconcileSuffix)
	e.st.entries["bb02"] = leaseEntry("bb02")
	pending := completedEntry("bb02" + store.ReconcileSuffix)
	pending.Record.Header = map[string][]string{store.MarkerPending: {"true"}}
	e.st.entries["bb02"+store.ReconcileSuffix] = pending
	for key, want := range map[string]bool{"aa01": true, "bb02": false} {
		rec := e.do(t, "GET", "/admin/keys/"+key, bearer, "")
		if got := strings.Contains(rec.Body.String(), `"settling"`); got != want {
			t.Errorf("%s: %s, settling shown %v, want %v", key, rec.Body.String(), got, want)
		}
	}
}

// A key whose stored bytes do not decode (a newer version's record,
// damaged bytes) is shown as an unreadable record, by get and in a
// listing, not answered as a failure of the store: it is what an operator
// looks for before deleting it.
func TestUndecodableRecordIsShownUnreadable(t *testing.T) {
	e := newEnv(t, testToken)
	e.st.opErr = fmt.Errorf("redis key aa01: corrupt record: unknown version 255 at offset 1: %w", store.ErrCorrupt)
	rec := e.do(t, "GET", "/admin/keys/aa01", bearer, "")
	want := `{"key_hash":"aa01","state":"completed","expires_at":"","unreadable":"format"}`
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != want {
		t.Errorf("GET of an undecodable record = %d %s\nwant 200 %s", rec.Code, rec.Body.String(), want)
	}
	if got := e.ops(opGet, resultOK); got != 1 {
		t.Errorf("get ok counted %v, want 1", got)
	}
	e.st.opErr = nil
	e.st.entries["bb02"] = store.UnreadableEntry("bb02", false, expires, fmt.Errorf("file store: %w", store.ErrCorrupt))
	rec = e.do(t, "GET", "/admin/keys?state=completed", bearer, "")
	want = `{"keys":[{"key_hash":"bb02","state":"completed","expires_at":"2026-12-01T09:00:00.123Z","unreadable":"format"}],"next_cursor":""}`
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != want {
		t.Errorf("list with an undecodable record = %d %s\nwant 200 %s", rec.Code, rec.Body.String(), want)
	}
}

// A key whose lease ended while its outcome was being settled (its
// settling proxy died) keeps its marker, which makes its next request ask
// the upstream instead of executing: deleting the key deletes that marker
// and answers 204, as for a key still there.
func TestDeleteOfAKeyWhoseLeaseEndedRemovesItsMarker(t *testing.T) {
	e := newEnv(t, testToken)
	e.st.entries["cc03"+store.ReconcileSuffix] = completedEntry("cc03" + store.ReconcileSuffix)
	if rec := e.do(t, "DELETE", "/admin/keys/cc03", bearer, ""); rec.Code != http.StatusNoContent {
		t.Fatalf("DELETE of a key left with its marker = %d %q, want 204", rec.Code, rec.Body.String())
	}
	if _, ok := e.st.entries["cc03"+store.ReconcileSuffix]; ok {
		t.Error("the key's marker is still in the store")
	}
	if rec := e.do(t, "DELETE", "/admin/keys/cc03", bearer, ""); rec.Code != http.StatusNotFound {
		t.Errorf("DELETE once neither is there = %d, want 404", rec.Code)
	}
}
