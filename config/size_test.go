package config

import (
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/bytesize"
)

func TestSizeFromYAMLInteger(t *testing.T) {
	cfg := mustLoad(t, Source{File: writeFile(t, upstreamOnly+"defaults:\n  max_response_body: 2048\n")})
	if got, want := cfg.Defaults.MaxResponseBody, 2*bytesize.KiB; got != want {
		t.Errorf("max_response_body = %d, want %d", got, want)
	}
}
