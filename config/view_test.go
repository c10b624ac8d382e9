package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func loadView(t *testing.T, src Source) *Config {
	t.Helper()
	c, err := Load(src)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeYAML(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// viewLine returns the view's line for a key at the start of a line
// (indented as it is nested), failing when there is none.
func viewLine(t *testing.T, view, prefix string) string {
	t.Helper()
	for line := range strings.SplitSeq(view, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	t.Fatalf("view has no line %q:\n%s", prefix, view)
	return ""
}

// The view names each value's origin: the flag, the variable, the file,
// the built-in default, or (in a route) the defaults it inherited.
func TestViewNamesEachValuesOrigin(t *testing.T) {
	file := writeYAML(t, `upstream:
  url: http://127.0.0.1:3000
defaults:
  ttl: 1h
routes:
  - match: "POST /v1/charges"
    ttl: 72h
`)
	c := loadView(t, Source{
		File:      file,
		Env:       []string{"IDEMPOTENCY_PROXY_LISTEN=:8181"},
		Overrides: map[string]string{"log_level": "debug"},
	})
	view := string(c.View(nil))
	for _, want := range []string{
		"listen: :8181 # env IDEMPOTENCY_PROXY_LISTEN",
		"admin_listen: :9090 # default",
		"log_level: debug # flag --log-level",
		"  url: http://127.0.0.1:3000 # file",
		"  ttl: 1h # file",
		"  lock_ttl: 30s # default",
		"  - match: POST /v1/charges # file",
		"    ttl: 72h # file",
		"    lock_ttl: 30s # defaults",
		"    release_statuses: [408, 425, 429, 503] # defaults",
		"# file: " + file,
	} {
		if !strings.Contains(view, want+"\n") {
			t.Errorf("view lacks %q:\n%s", want, view)
		}
	}
}

// Secrets are masked in the view: the admin token, and passwords in store
// URLs. A token file is a path, shown as it is; its content never.
func TestViewMasksSecrets(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("file-secret\n"), 0o600)
	for _, tc := range []struct {
		name, yaml string
		env        []string
		want       []string
	}{
		{"token and redis password", "upstream:\n  url: http://u:up-secret@127.0.0.1:3000\nstore:\n  redis:\n    url: redis://:hunter2@127.0.0.1:6379/0\n",
			[]string{"IDEMPOTENCY_PROXY_ADMIN_TOKEN=env-secret"},
			[]string{"  token: xxxxx # env IDEMPOTENCY_PROXY_ADMIN_TOKEN", "    url: redis://:xxxxx@127.0.0.1:6379/0 # file", "  url: http://u:xxxxx@127.0.0.1:3000 # file"}},
		{"postgres password", "upstream:\n  url: http://127.0.0.1:3000\nstore:\n  postgres:\n    url: postgres://idem:hunter2@db:5432/app?sslmode=require\n", nil,
			nil},
		{"token file", "upstream:\n  url: http://127.0.0.1:3000\nadmin:\n  token_file: " + tokenFile + "\n", nil,
			[]string{`  token: "" # default`, "  token_file: " + tokenFile + " # file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			view := string(loadView(t, Source{File: writeYAML(t, tc.yaml), Env: tc.env}).View(nil))
			if strings.Contains(tc.yaml, "postgres://") && !strings.Contains(view, "url: postgres://idem:xxxxx@db:5432/app?sslmode=require # file") {
				t.Errorf("view does not show the Postgres URL masked:\n%s", view)
			}
			for _, secret := range []string{"env-secret", "hunter2", "up-secret", "file-secret"} {
				if strings.Contains(view, secret) {
					t.Errorf("view shows the secret %q:\n%s", secret, view)
				}
			}
			for _, want := range tc.want {
				if got := viewLine(t, view, strings.SplitN(want, ":", 2)[0]+":"); got != want {
					t.Errorf("view line %q, want %q", got, want)
				}
			}
		})
	}
}

// Without secrets, the view is a configuration file that loads to the
// same configuration.
func TestViewLoadsToTheSameConfiguration(t *testing.T) {
	c := loadView(t, Source{File: "../config.example.yaml", Env: []string{"IDEMPOTENCY_PROXY_UPSTREAM_URL=http://127.0.0.1:3000"}})
	again := loadView(t, Source{File: writeYAML(t, string(c.View(nil)))})
	value := func(s Setting) string { return s.Key + "=" + s.Value }
	got, want := again.Settings(), c.Settings()
	if !slices.EqualFunc(got, want, func(a, b Setting) bool { return value(a) == value(b) }) {
		t.Errorf("view of the view differs:\n%s\nwant\n%s", again.View(nil), c.View(nil))
	}
}

// A reload's changes name each key with its old and new values, secrets
// masked, and say which need a restart.
func TestChangesListOldAndNewValues(t *testing.T) {
	old := loadView(t, Source{File: writeYAML(t, "upstream:\n  url: http://127.0.0.1:3000\nadmin:\n  token: one\nroutes:\n  - match: /a/\n")})
	next := loadView(t, Source{File: writeYAML(t, "upstream:\n  url: http://127.0.0.1:3001\nadmin:\n  token: two\ndefaults:\n  ttl: 1h\nroutes:\n  - match: /a/\n    ttl: 2h\n  - match: /b/\n")})
	got := next.Changes(old, old)
	want := []Change{
		{Key: "upstream.url", Old: "http://127.0.0.1:3000", New: "http://127.0.0.1:3001", Restart: true},
		{Key: "admin.token", Old: "xxxxx", New: "xxxxx"},
		{Key: "defaults.ttl", Old: "24h", New: "1h"},
		{Key: "routes[0].ttl", Old: "24h", New: "2h"},
	}
	if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Fatalf("changes = %+v\nwant first %+v", got, want)
	}
	for _, ch := range got[len(want):] {
		if !strings.HasPrefix(ch.Key, "routes[1].") || ch.Old != "(unset)" {
			t.Errorf("change %+v, want only routes[1] appearing", ch)
		}
	}
	if got := old.Changes(old, old); len(got) != 0 {
		t.Errorf("no edit: changes %+v", got)
	}
}

// An edit that puts a restart-only key back to the value the process
// runs with changes it, but nothing waits for a restart any more.
func TestChangeBackToTheRunningValueWaitsForNoRestart(t *testing.T) {
	started := loadView(t, Source{File: writeYAML(t, "upstream:\n  url: http://127.0.0.1:3000\n")})
	edited := loadView(t, Source{File: writeYAML(t, "upstream:\n  url: http://127.0.0.1:3001\n")})
	if got := edited.Changes(started, started); len(got) != 1 || !got[0].Restart {
		t.Fatalf("edit to a new upstream: changes %+v, want upstream.url waiting for a restart", got)
	}
	got := started.Changes(edited, started)
	want := []Change{{Key: "upstream.url", Old: "http://127.0.0.1:3001", New: "http://127.0.0.1:3000"}}
	if !slices.Equal(got, want) {
		t.Errorf("edit back to the running upstream: changes %+v, want %+v", got, want)
	}
}

// After a reload, a key that needs a restart shows its new value and the
// one still in force.
func TestViewSaysWhatWaitsForARestart(t *testing.T) {
	started := loadView(t, Source{File: writeYAML(t, upstreamOnly)})
	next := loadView(t, Source{File: writeYAML(t, upstreamOnly+"listen: :8181\n")})
	want := "listen: :8181 # file; needs a restart, running with :8080"
	if got := viewLine(t, string(next.View(started)), "listen:"); got != want {
		t.Errorf("view line %q, want %q", got, want)
	}
}
