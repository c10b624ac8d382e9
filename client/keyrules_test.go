package client

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

// A caller's key the client lets through is one the proxy takes, and one
// it refuses (ErrInvalidKey, before anything is sent) is one the proxy
// would answer 400 invalid-key: both read a key by the same rules, raw or
// as an RFC 8941 string (docs/request-handling.md).
func TestClientRefusesTheKeysTheProxyRefuses(t *testing.T) {
	u := &upstream{}
	u.steps = []http.HandlerFunc{u.execute}
	base := startProxy(t, startUpstream(t, u), nil)
	for _, key := range []string{
		NewKey(),
		"order-42",
		`"order-42"`,
		`"order,42"`,
		`"a\"b"`,
		`"` + strings.Repeat("k", 255) + `"`,
		strings.Repeat("k", 255),
		" order-43\t",
		"order,42",
		`"order-42`,
		`"order-42" x`,
		`"a\qb"`,
		`""`,
		`"` + strings.Repeat("k", 256) + `"`,
		strings.Repeat("k", 256),
		"clé",
	} {
		t.Run(key[:min(len(key), 20)], func(t *testing.T) {
			c := &Client{MaxAttempts: 1}
			req := newCharge(t, base, `{"amount":1}`)
			req.Header.Set(HeaderKey, key)
			resp, err := c.Do(t.Context(), req)
			var pe *ProblemError
			switch {
			case err == nil:
				_ = resp.Body.Close()
			case errors.As(err, &pe) && pe.Problem.Type == ProblemInvalidKey:
				t.Fatalf("Do(%q) sent a key the proxy refuses: %v", key, err)
			case !errors.Is(err, ErrInvalidKey):
				t.Fatalf("Do(%q): %v", key, err)
			default:
				// Refused before sending: the proxy must refuse it too.
				r := newCharge(t, base, `{"amount":1}`)
				r.Header.Set(HeaderKey, key)
				resp, err := http.DefaultClient.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusBadRequest {
					t.Errorf("client refused %q, the proxy answers it %d", key, resp.StatusCode)
				}
			}
		})
	}
}
