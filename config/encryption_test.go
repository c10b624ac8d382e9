package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// The keys file's variable set but empty (a Secret without its key) is
// refused: read as "no keys file", it would store new records in clear and
// leave those sealed before unreadable.
func TestKeysFileGivenEmptyIsRefusedNotReadAsEncryptionOff(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("k1 AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, upstreamOnly+"store:\n  encryption:\n    keys_file: "+keys+"\n")
	got := problemLines(t, Source{File: file, Env: []string{"IDEMPOTENCY_PROXY_STORE_ENCRYPTION_KEYS_FILE="}})
	want := []string{"store.encryption.keys_file: empty: name the keys file; encryption off would store new records in clear and leave sealed ones unreadable (from IDEMPOTENCY_PROXY_STORE_ENCRYPTION_KEYS_FILE)"}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Unset in the file, and not in the environment: encryption is off.
	if cfg := mustLoad(t, Source{File: writeFile(t, upstreamOnly)}); cfg.Store.Encryption.Keyring != nil {
		t.Errorf("no keys file, keyring %v", cfg.Store.Encryption.Keyring)
	}
}
