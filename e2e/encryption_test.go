package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
)

// Markers the upstream puts in a response header and body: no store value
// may contain them.
const (
	headerMarker = "hdr-marker-6f1c2b" // in X-Card
	bodyMarker   = "body-marker-93d4ae"
)

// markerUpstream answers every request 201 with headerMarker in a header
// and a body of bodyMarker, the key, its execution count and X-Pad bytes of
// every value 0–255, so a replay is checked byte for byte.
type markerUpstream struct {
	srv   *httptest.Server
	mu    sync.Mutex
	execs map[string]int
}

func startMarkerUpstream(t *testing.T) *markerUpstream {
	t.Helper()
	u := &markerUpstream{execs: map[string]int{}}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		u.mu.Lock()
		u.execs[key]++
		n := u.execs[key]
		u.mu.Unlock()
		pad, _ := strconv.Atoi(r.Header.Get("X-Pad"))
		body := []byte(fmt.Sprintf(`{"card":%q,"key":%q,"exec":%d}`, bodyMarker, key, n))
		for i := range pad {
			body = append(body, byte(i))
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Card", headerMarker)
		w.WriteHeader(http.StatusCreated)
		w.Write(body)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// Execs is how many times the upstream ran key.
func (u *markerUpstream) Execs(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.execs[key]
}

// keysFile writes lines to path atomically (a rename, as a Secret volume
// or an editor replaces a file).
func keysFile(t *testing.T, path string, lines ...string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// keyLine is a keys file line for id with a key of 32 bytes b.
func keyLine(id string, b byte) string {
	return id + " " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32))
}

const encToken = "enc-admin-token"

// encryptedProxy starts a proxy on store kind ("memory", "redis",
// "postgres") with store.encryption.keys_file set to keys. The Redis server
// is returned for tests that change its values; dump returns what the
// store holds (nil for memory): every Redis value, or every Postgres row's
// key, head and body, by key.
func encryptedProxy(t *testing.T, name, kind string, up *markerUpstream, keys string) (p *proxyProc, srv *redistest.Server, dump func() map[string][]byte) {
	t.Helper()
	cfg := proxyConfig{
		Upstream: up.srv.URL, UpstreamTimeout: 10 * time.Second, Memory: kind == "memory",
		Defaults: map[string]string{"ttl": "10m", "max_response_body": "2MiB"},
		Extra:    "admin:\n  token: " + encToken + "\n  pprof: true\n",
		Env:      []string{"IDEMPOTENCY_PROXY_STORE_ENCRYPTION_KEYS_FILE=" + keys},
	}
	switch kind {
	case "redis":
		srv = redistest.Start(t)
		cfg.RedisURL = srv.URL()
		dump = func() map[string][]byte { return redisValues(t, srv, "*") }
	case "postgres":
		pg := pgtest.Start(t)
		cfg.PostgresURL = pg.URL()
		dump = func() map[string][]byte { return postgresRows(t, pg) }
	case "file":
		cfg.FilePath = t.TempDir()
		dump = func() map[string][]byte { return files(t, cfg.FilePath) }
	}
	return startProxy(t, name, cfg), srv, dump
}

// files returns the content of every file under dir, by path.
func files(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		out[path] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// postgresRows returns every row of the proxy's table: its key, head and
// body, as the database holds them.
func postgresRows(t *testing.T, pg *pgtest.Server) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	rows, err := pg.Conn(t).Query(ctx, "SELECT key, coalesce(head, ''::bytea), coalesce(body, ''::bytea) FROM idempotency_keys")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]byte{}
	for rows.Next() {
		var key string
		var head, body []byte
		if err := rows.Scan(&key, &head, &body); err != nil {
			t.Fatal(err)
		}
		out[key] = append(append([]byte(key+"\x00"), head...), body...)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// charge sends a keyed POST asking for pad bytes of padding.
func charge(t *testing.T, c *http.Client, p *proxyProc, key string, pad int) reply {
	t.Helper()
	return mustSend(t, c, p.URL(), request{Key: key, Body: `{"amount":1}`, Header: map[string]string{"X-Pad": strconv.Itoa(pad)}})
}

// redisValues returns the keys matching pattern in srv and their values;
// "idem:{*" are the idempotency keys (not the store's epoch markers).
func redisValues(t *testing.T, srv *redistest.Server, pattern string) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	rc := srv.Client(t)
	out := map[string][]byte{}
	iter := rc.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		v, err := rc.Get(ctx, iter.Val()).Bytes()
		if err != nil {
			t.Fatalf("GET %s: %v", iter.Val(), err)
		}
		out[iter.Val()] = v
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// reload writes the keys file with lines, sends SIGHUP and waits for a
// log line containing want beyond those logged before the file was
// written: the keys in force (`"key_ids":["new","old"]`) or the problem of
// a rejected reload. The file's own watch may reload it first, and then
// the SIGHUP finds nothing changed and logs nothing; counting from before
// the write, and waiting for the outcome, not for a reload, covers both.
func reload(t *testing.T, p *proxyProc, want, path string, lines ...string) {
	t.Helper()
	count := func() int { return strings.Count(p.Logs(), want) }
	before := count()
	keysFile(t, path, lines...)
	p.Signal(syscall.SIGHUP)
	waitForValue(t, "log lines with "+want, func() string { return strconv.Itoa(min(count()-before, 1)) }, "1")
}

// TestEncryptedRecordsHoldNothingInClearAndReplayExactly runs the built
// binary on Redis, Postgres and the file store with a keys file: every
// response replays byte for byte, header included, while nothing the store
// holds (every Redis value, every column of the Postgres table, every file
// of the file store's directory) has a byte of a recorded header or body —
// nor a header name, nor the raw key.
func TestEncryptedRecordsHoldNothingInClearAndReplayExactly(t *testing.T) {
	for _, kind := range []string{"redis", "postgres", "file"} {
		t.Run(kind, func(t *testing.T) { holdsNothingInClear(t, kind) })
	}
}

func holdsNothingInClear(t *testing.T, kind string) {
	up := startMarkerUpstream(t)
	keys := filepath.Join(t.TempDir(), "keys")
	keysFile(t, keys, "# first key seals", keyLine("2026-01", 1))
	p, _, dump := encryptedProxy(t, "enc-"+kind, kind, up, keys)
	c := newClient(t, 30*time.Second)

	sizes := map[string]int{"small-200": 150, "medium-16k": 16 << 10, "large-1m": 1 << 20}
	for key, pad := range sizes {
		first := charge(t, c, p, key, pad)
		again := charge(t, c, p, key, pad)
		if first.Status != http.StatusCreated || !again.Replayed() || again.Status != first.Status ||
			again.Body != first.Body || again.Header.Get("X-Card") != headerMarker {
			t.Fatalf("%s: first %s, retry %s (X-Card %q, bodies equal %v); want the byte-exact replay",
				key, first, again, again.Header.Get("X-Card"), again.Body == first.Body)
		}
		if n := up.Execs(key); n != 1 {
			t.Fatalf("%s executed %d times, want 1", key, n)
		}
	}

	held, records := dump(), 0
	for k, v := range held {
		for _, secret := range []string{headerMarker, bodyMarker, "X-Card", "octet-stream", "small-200", "medium-16k", "large-1m"} {
			if bytes.Contains(v, []byte(secret)) {
				t.Errorf("%s key %s holds %q in clear", kind, k, secret)
			}
		}
		records += bytes.Count(v, []byte("2026-01")) // the key id, readable
	}
	// The file store appends: a record may be written more than once.
	if records != len(sizes) && !(kind == "file" && records > len(sizes)) {
		t.Fatalf("%s holds %d records naming their key id among %d keys, want %d", kind, records, len(held), len(sizes))
	}
}

// TestCopiedRecordIsRefusedAndNotExecutedAgain copies one key's record over
// another's in Redis: the second key's record does not authenticate under
// its own storage key, so it is refused with 503 record-unreadable, logged
// with its key id and counted, and the upstream is not called again.
func TestCopiedRecordIsRefusedAndNotExecutedAgain(t *testing.T) {
	up := startMarkerUpstream(t)
	keys := filepath.Join(t.TempDir(), "keys")
	keysFile(t, keys, keyLine("k1", 1))
	p, srv, _ := encryptedProxy(t, "enc-copy", "redis", up, keys)
	c := newClient(t, 10*time.Second)

	charge(t, c, p, "victim", 10)
	victim := onlyKey(t, redisValues(t, srv, "idem:{*"))
	charge(t, c, p, "attacker", 10)
	var attacker string
	for k := range redisValues(t, srv, "idem:{*") {
		if k != victim {
			attacker = k
		}
	}
	rc := srv.Client(t)
	ctx := context.Background()
	v, err := rc.Get(ctx, attacker).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Set(ctx, victim, v, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		r := charge(t, c, p, "victim", 10)
		if r.Status != http.StatusServiceUnavailable || r.Problem() != "record-unreadable" {
			t.Fatalf("victim after the copy: %s %s, want 503 record-unreadable", r, r.Body)
		}
	}
	if n := up.Execs("victim"); n != 1 {
		t.Fatalf("victim executed %d times, want 1", n)
	}
	if got := adminMetric(t, p, `idempotency_proxy_record_unreadable_total{reason="auth_failed"}`); got != "2" {
		t.Errorf("record_unreadable_total{reason=auth_failed} = %q, want 2", got)
	}
	if len(p.logLines(map[string]string{"level": "ERROR", "reason": "auth_failed", "key_id": "k1"})) != 2 {
		t.Errorf("want 2 error lines with reason auth_failed and key_id k1:\n%s", p.Logs())
	}
	// The attacker's own record still replays.
	if r := charge(t, c, p, "attacker", 10); !r.Replayed() {
		t.Errorf("attacker: %s, want its replay", r)
	}
}

func onlyKey(t *testing.T, values map[string][]byte) string {
	t.Helper()
	if len(values) != 1 {
		t.Fatalf("%d keys, want 1", len(values))
	}
	for k := range values {
		return k
	}
	return ""
}

// TestKeyRotationAcrossReloads rotates keys on a running proxy, on either
// store: a record stays readable while its key is listed, is refused (and
// never executed again) once its key is removed, and a keys file that does
// not load on reload keeps the keys in force.
func TestKeyRotationAcrossReloads(t *testing.T) {
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			up := startMarkerUpstream(t)
			keys := filepath.Join(t.TempDir(), "keys")
			keysFile(t, keys, keyLine("old", 1))
			p, _, _ := encryptedProxy(t, "enc-rotate-"+kind, kind, up, keys)
			c := newClient(t, 10*time.Second)
			replays := func(key string) {
				t.Helper()
				if r := charge(t, c, p, key, 64); !r.Replayed() || r.Header.Get("X-Card") != headerMarker {
					t.Fatalf("%s: %s, want its replay", key, r)
				}
			}

			before := charge(t, c, p, "before", 64)
			reload(t, p, `"key_ids":["new","old"]`, keys, keyLine("new", 2), keyLine("old", 1))
			replays("before")
			after := charge(t, c, p, "after", 64)
			if before.Status != http.StatusCreated || after.Status != http.StatusCreated {
				t.Fatalf("before %s, after %s; want both executed", before, after)
			}
			if got := sealedBy(t, p, "after"); got != "new" {
				t.Fatalf("after the rotation a record is sealed by %q, want new", got)
			}
			if got := sealedBy(t, p, "before"); got != "old" {
				t.Fatalf("the earlier record is sealed by %q, want old", got)
			}

			reload(t, p, `"key_ids":["new"]`, keys, keyLine("new", 2))
			for range 2 {
				if r := charge(t, c, p, "before", 64); r.Status != http.StatusServiceUnavailable || r.Problem() != "record-unreadable" {
					t.Fatalf("before, its key removed: %s, want 503 record-unreadable", r)
				}
			}
			replays("after")
			if n := up.Execs("before"); n != 1 {
				t.Fatalf("before executed %d times, want 1", n)
			}
			if got := adminMetric(t, p, `idempotency_proxy_record_unreadable_total{reason="key_unknown"}`); got != "2" {
				t.Errorf("record_unreadable_total{reason=key_unknown} = %q, want 2", got)
			}
			if len(p.logLines(map[string]string{"level": "ERROR", "reason": "key_unknown", "key_id": "old"})) == 0 {
				t.Errorf("no error line names key id old:\n%s", p.Logs())
			}

			// A keys file that does not load: the reload is rejected with
			// the file and line, and the keys in force stay.
			want, _ := json.Marshal(keys + `:2: key "broken" is 16 bytes after decoding, want 32`)
			reload(t, p, strings.Trim(string(want), `"`), keys,
				keyLine("new", 2), "broken "+base64.StdEncoding.EncodeToString(make([]byte, 16)))
			replays("after")
			if r := charge(t, c, p, "later", 64); r.Status != http.StatusCreated || sealedBy(t, p, "later") != "new" {
				t.Fatalf("after a rejected reload: %s sealed by %q, want executed and sealed by new", r, sealedBy(t, p, "later"))
			}

			// The key back in the file: the record opens again.
			reload(t, p, `"key_ids":["new","old"]`, keys, keyLine("new", 2), keyLine("old", 1))
			replays("before")
			if n := up.Execs("before"); n != 1 {
				t.Fatalf("before executed %d times, want 1", n)
			}
			assertNoKeyMaterial(t, p.Logs(), 1, 2)
			if view := adminText(t, p, "/admin/config"); !strings.Contains(view, "keys_file: "+keys) {
				t.Errorf("/admin/config does not show keys_file %s:\n%s", keys, view)
			} else {
				assertNoKeyMaterial(t, view, 1, 2)
			}
			assertNoKeyMaterial(t, adminText(t, p, "/debug/pprof/cmdline"), 1, 2)
		})
	}
}

// sealedBy asks the key API which key sealed the record of key.
func sealedBy(t *testing.T, p *proxyProc, key string) string {
	t.Helper()
	var hashed struct {
		KeyHash string `json:"key_hash"`
	}
	in := fmt.Sprintf(`{"key":%q,"path":"/v1/orders","host":%q}`, key, p.listen)
	adminCall(t, p, encToken, "POST", "/admin/hash", []byte(in), &hashed)
	var entry struct {
		SealedBy string              `json:"sealed_by"`
		Headers  map[string][]string `json:"headers"`
	}
	adminCall(t, p, encToken, "GET", "/admin/keys/"+hashed.KeyHash, nil, &entry)
	return entry.SealedBy
}

// adminText is the body of an admin GET with the token, whatever its status.
func adminText(t *testing.T, p *proxyProc, path string) string {
	t.Helper()
	req, err := http.NewRequest("GET", p.AdminURL()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+encToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(res.Body)
	return b.String()
}

// assertNoKeyMaterial fails if out shows a key of 32 bytes b, in any base64.
func assertNoKeyMaterial(t *testing.T, out string, bs ...byte) {
	t.Helper()
	for _, b := range bs {
		raw := bytes.Repeat([]byte{b}, 32)
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
			if s := enc.EncodeToString(raw); strings.Contains(out, s[:20]) {
				t.Errorf("output shows the key of byte %#x", b)
			}
		}
	}
}

// A keys file that does not load stops the proxy at start with exit status
// 2 and the file and line; --check names the keys by id only.
func TestBadKeysFileAtStartAndCheck(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	run := func(args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(proxyBin, args...)
		cmd.Env = append(os.Environ(), "IDEMPOTENCY_PROXY_UPSTREAM_URL=http://127.0.0.1:1",
			"IDEMPOTENCY_PROXY_LISTEN="+freeAddr(t), "IDEMPOTENCY_PROXY_ADMIN_LISTEN="+freeAddr(t),
			"IDEMPOTENCY_PROXY_STORE_ENCRYPTION_KEYS_FILE="+keys)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	for name, tc := range map[string]struct {
		lines []string
		want  string
	}{
		"short key":    {[]string{keyLine("a", 1), "b " + base64.StdEncoding.EncodeToString(make([]byte, 31))}, keys + `:2: key "b" is 31 bytes after decoding, want 32`},
		"duplicate id": {[]string{keyLine("a", 1), "# again", keyLine("a", 2)}, keys + `:3: key id "a" is already on line 1`},
		"missing":      {nil, keys + ": cannot read: no such file or directory"},
	} {
		t.Run(name, func(t *testing.T) {
			os.Remove(keys)
			if tc.lines != nil {
				keysFile(t, keys, tc.lines...)
			}
			code, out := run()
			if code != 2 || !strings.Contains(out, "store.encryption.keys_file: "+tc.want) {
				t.Fatalf("exit %d, output:\n%s\nwant exit 2 and %q", code, out, tc.want)
			}
			assertNoKeyMaterial(t, out, 1, 2)
		})
	}

	keysFile(t, keys, keyLine("2026-03", 3), keyLine("2026-01", 1))
	_, out := run("--check")
	if !strings.Contains(out, `seals with "2026-03", opens ["2026-03" "2026-01"]`) {
		t.Errorf("--check does not name the keys by id:\n%s", out)
	}
	assertNoKeyMaterial(t, out, 1, 3)
}
