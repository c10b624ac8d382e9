package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The keys file is read by Load: a reload that loads the configuration
// again reads it again, and applies it without a restart.
func TestKeysFileIsReadByLoadAndReloadsLive(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(keys, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("old AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n")
	src := Source{Env: []string{
		"IDEMPOTENCY_PROXY_UPSTREAM_URL=http://127.0.0.1:3000",
		"IDEMPOTENCY_PROXY_STORE_ENCRYPTION_KEYS_FILE=" + keys,
	}}
	first, err := Load(src)
	if err != nil {
		t.Fatal(err)
	}
	if got := first.Store.Encryption.Keyring.IDs(); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("keyring ids = %q, want [old]", got)
	}

	write("new AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\nold AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n")
	next, err := Load(src)
	if err != nil {
		t.Fatal(err)
	}
	if got := next.Store.Encryption.Keyring.IDs(); !slices.Equal(got, []string{"new", "old"}) {
		t.Fatalf("reloaded keyring ids = %q, want [new old]", got)
	}
	if keys := next.RestartNeeded(first); len(keys) != 0 {
		t.Errorf("RestartNeeded = %q, want none: the keyring applies on reload", keys)
	}

	off, err := Load(Source{Env: src.Env[:1]})
	if err != nil || off.Store.Encryption.Keyring != nil {
		t.Fatalf("without keys_file: keyring %v, %v; want none", off.Store.Encryption.Keyring, err)
	}
}
