package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestKeysBadUsageExits2(t *testing.T) {
	for _, args := range [][]string{
		{"keys"},
		{"keys", "frobnicate"},
		{"keys", "get"},
		{"keys", "get", "a", "b"},
		{"keys", "delete"},
		{"keys", "list", "--state", "done"},
		{"keys", "list", "--limit", "0"},
		{"keys", "list", "--limit", "1001"},
		{"keys", "hash"},
		{"keys", "hash", "--key", "k", "--header", "no colon"},
		{"keys", "get", "ab", "--admin", "ftp://x"},
		{"keys", "get", "ab", "--token-file", "/nonexistent/token"},
		{"keys", "get", "ab", "--no-such-flag"},
	} {
		if code, _, errs := runBinary(t, nil, args...); code != 2 || errs == "" {
			t.Errorf("%s: exit %d, stderr %q; want 2 and a reason", strings.Join(args, " "), code, errs)
		}
	}
}

// fakeAdmin records the requests the CLI makes and answers from a table.
type fakeAdmin struct {
	mu   sync.Mutex
	reqs []string // "METHOD URI AUTH BODY"
	srv  *httptest.Server
}

func newFakeAdmin(t *testing.T) *fakeAdmin {
	f := &fakeAdmin{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		b, _ := json.Marshal(body)
		f.mu.Lock()
		f.reqs = append(f.reqs, r.Method+" "+r.RequestURI+" "+r.Header.Get("Authorization")+" "+string(b))
		f.mu.Unlock()
		switch {
		case strings.HasSuffix(r.URL.Path, "/dead00"):
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"type":"https://idempotency-proxy.dev/problems/key-not-found","status":404}`))
		case r.Header.Get("Authorization") == "Bearer wrong" ||
			strings.HasSuffix(r.URL.Path, "/beef00") && r.Header.Get("Authorization") == "":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"type":"https://idempotency-proxy.dev/problems/unauthorized","status":401,"detail":"Send the admin token as Authorization: Bearer TOKEN."}`))
		case r.Method == "DELETE":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"ok":true}`))
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAdmin) last() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reqs[len(f.reqs)-1]
}

func TestKeysCallsTheAdminAPI(t *testing.T) {
	f := newFakeAdmin(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("from-file\n"), 0o600)
	env := []string{adminTokenEnv + "=from-env"}
	bodyFile := filepath.Join(t.TempDir(), "event.json")
	os.WriteFile(bodyFile, []byte(`{"id":"evt_1"}`), 0o600)
	for _, tc := range []struct {
		args         []string
		wantReq, out string
	}{
		{[]string{"get", "ab12"}, "GET /admin/keys/ab12 Bearer from-env null", `"ok": true`},
		{[]string{"get", "--admin", f.srv.URL, "ab12", "--token-file", tokenFile}, "GET /admin/keys/ab12 Bearer from-file null", `"ok": true`},
		{[]string{"delete", "ab12"}, "DELETE /admin/keys/ab12 Bearer from-env null", `"deleted": true`},
		{[]string{"list", "--state", "in_flight", "--limit", "5", "--cursor", "c 1"}, "GET /admin/keys?cursor=c+1&limit=5&state=in_flight Bearer from-env null", `"ok": true`},
		{[]string{"find", "order 42"}, "GET /admin/keys?key=order+42&limit=1000 Bearer from-env null", `"keys": []`},
		{[]string{"hash", "--key", "k1", "--path", "/v1/charges", "--host", "api", "--header", "authorization: Bearer x"},
			`POST /admin/hash Bearer from-env {"headers":{"Authorization":"Bearer x"},"host":"api","key":"k1","method":"POST","path":"/v1/charges"}`, `"ok": true`},
		{[]string{"hash", "--key", "evt_1", "--source", "json:/id", "--path", "/webhooks/stripe"},
			`POST /admin/hash Bearer from-env {"headers":{},"host":"","key":"evt_1","method":"POST","path":"/webhooks/stripe","source":"json:/id"}`, `"ok": true`},
		{[]string{"hash", "--body-file", bodyFile, "--path", "/webhooks/stripe"},
			`POST /admin/hash Bearer from-env {"body":"{\"id\":\"evt_1\"}","headers":{},"host":"","key":"","method":"POST","path":"/webhooks/stripe"}`, `"ok": true`},
	} {
		args := append([]string{"keys"}, tc.args...)
		if !strings.Contains(strings.Join(tc.args, " "), "--admin") {
			args = append(args, "--admin", f.srv.URL)
		}
		code, out, errs := runBinary(t, env, args...)
		if code != 0 || !strings.Contains(out, tc.out) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", tc.args, code, out, errs)
			continue
		}
		if got := f.last(); got != tc.wantReq {
			t.Errorf("%v sent\n  %s\nwant\n  %s", tc.args, got, tc.wantReq)
		}
	}
}

func TestKeysFailedCallExits1WithTheProblemOnStderr(t *testing.T) {
	f := newFakeAdmin(t)
	code, out, errs := runBinary(t, nil, "keys", "get", "dead00", "--admin", f.srv.URL)
	if code != 1 || out != "" || !strings.Contains(errs, "key-not-found") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 1 and the problem on stderr", code, out, errs)
	}
	f.srv.Close()
	if code, _, errs := runBinary(t, nil, "keys", "list", "--admin", f.srv.URL); code != 1 || !strings.Contains(errs, "connection refused") {
		t.Fatalf("admin down: exit %d, stderr %q; want 1 with the cause", code, errs)
	}
}

// A 401 tells a command-line user how to give the token, not how to send
// an HTTP header.
func TestKeysUnauthorizedSaysHowToSetTheToken(t *testing.T) {
	f := newFakeAdmin(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("wrong\n"), 0o600)
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, nil, "idempotency-proxy: the admin API needs its token (401): set IDEMPOTENCY_PROXY_ADMIN_TOKEN or --token-file\n"},
		{[]string{adminTokenEnv + "=wrong"}, nil,
			"idempotency-proxy: the proxy refused the admin token from IDEMPOTENCY_PROXY_ADMIN_TOKEN (401): set IDEMPOTENCY_PROXY_ADMIN_TOKEN or --token-file to the proxy's admin.token\n"},
		{nil, []string{"--token-file", tokenFile},
			"idempotency-proxy: the proxy refused the admin token from --token-file " + tokenFile + " (401): set IDEMPOTENCY_PROXY_ADMIN_TOKEN or --token-file to the proxy's admin.token\n"},
	} {
		args := append([]string{"keys", "get", "beef00", "--admin", f.srv.URL}, tc.args...)
		code, out, errs := runBinary(t, tc.env, args...)
		if code != 1 || out != "" || errs != tc.want {
			t.Errorf("%v: exit %d, stdout %q, stderr\n  %q\nwant 1 and\n  %q", tc.args, code, out, errs, tc.want)
		}
	}
}

// Each command's failures start with its own name: `config` is not `keys`.
func TestAdminCommandsNameThemselvesInTheirErrors(t *testing.T) {
	f := newFakeAdmin(t)
	f.srv.Close()
	for _, args := range [][]string{
		{"config", "--admin", f.srv.URL},
		{"keys", "list", "--admin", f.srv.URL},
	} {
		code, _, errs := runBinary(t, nil, args...)
		want := "idempotency-proxy " + args[0] + ": "
		if code != 1 || !strings.HasPrefix(errs, want) || strings.Count(errs, "idempotency-proxy ") != 1 {
			t.Errorf("%v with the admin listener down: exit %d, stderr %q; want 1 and one line starting %q", args, code, errs, want)
		}
	}
}

// keys get and delete take a key_hash; given a raw key, they point at the
// commands that take one, not at an HTTP endpoint.
func TestKeysGetOfARawKeyPointsAtFindAndHash(t *testing.T) {
	code, _, errs := runBinary(t, nil, "keys", "get", "8e03978e-40d5-43e8-bc93-6894a57f9324")
	if code != 2 || !strings.Contains(errs, "idempotency-proxy keys find KEY") || !strings.Contains(errs, "idempotency-proxy keys hash --key KEY") ||
		strings.Contains(errs, "/admin/") {
		t.Errorf("keys get RAW: exit %d, stderr %q; want 2 naming keys find and keys hash", code, errs)
	}
}
