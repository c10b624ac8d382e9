package config

import (
	"slices"
	"strings"
	"testing"
)

// A Secret without its key gives the variable an empty value: the proxy
// must refuse it, not run each replica on a memory store of its own.
func TestStoreAddressGivenEmptyIsRefusedNotReadAsMemory(t *testing.T) {
	fileRedis := writeFile(t, upstreamOnly+"store:\n  redis:\n    url: redis://127.0.0.1:6390/0\n")
	tests := []struct {
		name string
		src  Source
		want []string
	}{
		{"empty variable over the file's url", Source{File: fileRedis, Env: []string{
			"IDEMPOTENCY_PROXY_STORE_REDIS_URL=",
		}}, []string{
			"store.redis.url: empty, so no store would be selected and every key kept in this process's memory: give the store's address, or set store.kind: memory (from IDEMPOTENCY_PROXY_STORE_REDIS_URL)",
		}},
		{"empty variable, nothing in the file", Source{Env: []string{
			"IDEMPOTENCY_PROXY_UPSTREAM_URL=http://127.0.0.1:3000",
			"IDEMPOTENCY_PROXY_STORE_POSTGRES_URL=",
		}}, []string{
			"store.postgres.url: empty, so no store would be selected and every key kept in this process's memory: give the store's address, or set store.kind: memory (from IDEMPOTENCY_PROXY_STORE_POSTGRES_URL)",
		}},
		{"empty address list", Source{Env: []string{
			"IDEMPOTENCY_PROXY_UPSTREAM_URL=http://127.0.0.1:3000",
			"IDEMPOTENCY_PROXY_STORE_REDIS_ADDRS=",
		}}, []string{
			"store.redis.addrs: empty, so no store would be selected and every key kept in this process's memory: give the store's address, or set store.kind: memory (from IDEMPOTENCY_PROXY_STORE_REDIS_ADDRS)",
		}},
		{"empty flag", Source{File: writeFile(t, upstreamOnly), Overrides: map[string]string{"store.file.path": ""}}, []string{
			"store.file.path: empty, so no store would be selected and every key kept in this process's memory: give the store's address, or set store.kind: memory (from --store-path)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := problemLines(t, tt.src); !slices.Equal(got, tt.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// An empty address is no mistake where the store is chosen otherwise.
func TestStoreAddressGivenEmptyWhereTheStoreIsChosenOtherwise(t *testing.T) {
	fileRedis := writeFile(t, upstreamOnly+"store:\n  redis:\n    url: redis://127.0.0.1:6390/0\n")
	tests := []struct {
		name string
		src  Source
		want string
	}{
		{"memory chosen by name", Source{Env: []string{
			"IDEMPOTENCY_PROXY_UPSTREAM_URL=http://127.0.0.1:3000",
			"IDEMPOTENCY_PROXY_STORE_REDIS_URL=",
			"IDEMPOTENCY_PROXY_STORE_KIND=memory",
		}}, "memory"},
		{"another store's address selects it", Source{File: fileRedis, Env: []string{
			"IDEMPOTENCY_PROXY_STORE_POSTGRES_URL=",
		}}, "redis"},
		{"empty in the file", Source{File: writeFile(t, upstreamOnly+"store:\n  redis:\n    url: \"\"\n")}, "memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Load(tt.src)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got := cfg.Store.Kind; got != tt.want {
				t.Errorf("store.kind = %q, want %q", got, tt.want)
			}
		})
	}
}
