package config

import (
	"slices"
	"testing"
	"time"
)

func TestRestartNeeded(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *Config)
		want   []string
	}{
		{"nothing", func(*Config) {}, nil},
		{"policies and routes reload", func(c *Config) {
			c.Defaults.TTL = time.Hour
			c.Routes = append(c.Routes, Route{Match: "/new/", Enabled: true})
			c.LogLevel = LogError
		}, nil},
		{"listeners", func(c *Config) { c.Listen, c.AdminListen = ":1", ":2" }, []string{"listen", "admin_listen"}},
		{"store", func(c *Config) {
			c.Store.Kind = StoreRedis
			c.Store.Redis.Addrs = []string{"127.0.0.1:7000"}
			c.Store.Redis.KeyPrefix = "x:"
		}, []string{"store.kind", "store.redis.addrs", "store.redis.key_prefix"}},
		{"upstream", func(c *Config) {
			c.Upstream.URL = mustURL(t, "http://127.0.0.1:4000")
			c.Upstream.Timeout = time.Second
		}, []string{"upstream.url", "upstream.timeout"}},
		{"memory bound", func(c *Config) { c.Store.Memory.MaxBytes = 1 << 30 }, []string{"store.memory.max_bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := mustLoad(t, Source{File: "../config.example.yaml"})
			c := mustLoad(t, Source{File: "../config.example.yaml"})
			tt.change(c)
			if got := c.RestartNeeded(old); !slices.Equal(got, tt.want) {
				t.Errorf("RestartNeeded = %q, want %q", got, tt.want)
			}
		})
	}
	if got := Default().RestartNeeded(nil); got != nil {
		t.Errorf("RestartNeeded(nil) = %q, want nil", got)
	}
}
