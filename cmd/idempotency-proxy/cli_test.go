package main

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	code, out, _ := runBinary(t, nil, "--version")
	if code != 0 || out != "idempotency-proxy v0.0.0-test\n" {
		t.Fatalf("--version: exit %d, %q", code, out)
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	writeFile(t, good, "upstream:\n  url: http://127.0.0.1:3000\nstore:\n  redis:\n    url: redis://127.0.0.1:1/0\n")
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, `upstream:
  url: "ftp://x"
defaults:
  ttl: 10s
  lock_ttl: 30s
  concurrent: sometimes
routes:
  - match: "POST /v1/charges"
    tll: 72h
  - match: "POST /v1/charges"
`)
	t.Run("valid, store never contacted", func(t *testing.T) {
		code, out, errs := runBinary(t, nil, "--config", good, "--validate")
		if code != 0 || out != "config OK\n" {
			t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and config OK", code, out, errs)
		}
	})
	t.Run("every problem with its key path", func(t *testing.T) {
		code, _, errs := runBinary(t, nil, "--config", bad, "--validate")
		if code != 2 {
			t.Fatalf("exit %d, want 2", code)
		}
		for _, want := range []string{"upstream.url", "defaults.lock_ttl", "defaults.concurrent", "routes[0].tll", "routes[1].match"} {
			if !strings.Contains(errs, want) {
				t.Errorf("stderr lacks %s:\n%s", want, errs)
			}
		}
	})
	t.Run("invalid config starts nothing", func(t *testing.T) {
		code, _, _ := runBinary(t, nil, "--config", bad, "--listen", freeAddr(t))
		if code != 2 {
			t.Fatalf("exit %d, want 2", code)
		}
	})
	t.Run("bad flag", func(t *testing.T) {
		if code, _, _ := runBinary(t, nil, "--no-such-flag"); code != 2 {
			t.Fatalf("exit %d, want 2", code)
		}
	})
	t.Run("no upstream", func(t *testing.T) {
		code, _, errs := runBinary(t, nil, "--validate")
		if code != 2 || !strings.Contains(errs, "upstream.url") {
			t.Fatalf("exit %d, stderr %q; want 2 naming upstream.url", code, errs)
		}
	})
}

// Flag > environment > file: each layer's upstream answers with its name.
func TestPrecedence(t *testing.T) {
	upstream := func(name string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(name)) }))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	file := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, file, "upstream:\n  url: "+upstream("file")+"\n")
	env := []string{"IDEMPOTENCY_PROXY_UPSTREAM_URL=" + upstream("env")}

	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"file", nil, []string{"--config", file}},
		{"env", env, []string{"--config", file}},
		{"flag", env, []string{"--config", file, "--upstream", upstream("flag")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t, tc.env, tc.args...)
			if _, body := p.post(t, "/", "", ""); body != tc.name {
				t.Fatalf("request went to %q, want %q", body, tc.name)
			}
		})
	}
}

func TestZeroConfigProxiesEveryPath(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("upstream " + r.URL.Path))
	}))
	t.Cleanup(srv.Close)
	p := start(t, nil, "--upstream", srv.URL)
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if _, body := p.post(t, path, "", ""); body != "upstream "+path {
			t.Errorf("proxy listener %s answered %q, want the upstream's answer", path, body)
		}
	}
}
