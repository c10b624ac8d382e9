package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// payloadRoutes key one route by a member of its JSON body and another by
// the hash of its whole body: keys no client sends, which an operator can
// only name through POST /admin/hash or `keys hash`.
const payloadRoutes = `routes:
  - match: "POST /v1/orders"
    key_sources: ["json:/id"]
  - match: "POST /v1/blobs"
    key_sources: [body_sha256]
`

// TestKeyHashOfAPayloadKeyIsTheOneTheProxyLogged runs the built binary
// with payload-derived keys, logging at debug. For each request, the
// key_hash POST /admin/hash and `idempotency-proxy keys hash` compute —
// from the key and its source, or from the body as the proxy finds the key
// in it — is the key_hash the proxy logged for that request, and `keys get`
// with it finds the record.
func TestKeyHashOfAPayloadKeyIsTheOneTheProxyLogged(t *testing.T) {
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			storeYAML := "store:\n  kind: memory\n"
			if kind == "redis" {
				storeYAML = "store:\n  kind: redis\n  redis:\n    url: " + redistest.Start(t).URL() + "\n"
			}
			up := startUpstream(t)
			// startAdminProxy takes top-level YAML: the routes go with the store.
			p := startAdminProxy(t, up, storeYAML+payloadRoutes)
			host := p.listen

			order := `{"id":"ord-7","amount":5}`
			blob := "raw payload, hashed whole\n"
			orderHash := postAndLogged(t, p, "/v1/orders", order, 1)
			blobHash := postAndLogged(t, p, "/v1/blobs", blob, 2)
			if orderHash == blobHash {
				t.Fatalf("two requests logged one key_hash %s", orderHash)
			}
			orderFile := filepath.Join(t.TempDir(), "order.json")
			blobFile := filepath.Join(t.TempDir(), "blob.bin")
			if err := os.WriteFile(orderFile, []byte(order), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(blobFile, []byte(blob), 0o600); err != nil {
				t.Fatal(err)
			}

			for _, tc := range []struct {
				name   string
				logged string
				api    map[string]any
				cli    []string
			}{
				{"key and json source", orderHash,
					map[string]any{"key": "ord-7", "source": "json:/id"},
					[]string{"--key", "ord-7", "--source", "json:/id", "--path", "/v1/orders"}},
				{"order body", orderHash,
					map[string]any{"body": order},
					[]string{"--body-file", orderFile, "--path", "/v1/orders"}},
				{"blob body", blobHash,
					map[string]any{"body": blob, "path": "/v1/blobs"},
					[]string{"--body-file", blobFile, "--path", "/v1/blobs"}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					in := map[string]any{"method": "POST", "path": "/v1/orders", "host": host}
					for k, v := range tc.api {
						in[k] = v
					}
					body, _ := json.Marshal(in)
					var got struct {
						KeyHash string `json:"key_hash"`
					}
					adminCall(t, p, runbookToken, "POST", "/admin/hash", body, &got)
					if got.KeyHash != tc.logged {
						t.Errorf("POST /admin/hash %s = %s, the proxy logged %s", body, got.KeyHash, tc.logged)
					}
					args := append([]string{"hash", "--method", "POST", "--host", host}, tc.cli...)
					if h := keysJSON(t, p, args...)["key_hash"]; h != tc.logged {
						t.Errorf("keys %s = %v, the proxy logged %s", strings.Join(args, " "), h, tc.logged)
					}
				})
			}

			// Another order id is another key: the hash depends on the key.
			body, _ := json.Marshal(map[string]any{"key": "ord-8", "source": "json:/id", "path": "/v1/orders", "host": host})
			var other struct {
				KeyHash string `json:"key_hash"`
			}
			adminCall(t, p, runbookToken, "POST", "/admin/hash", body, &other)
			if other.KeyHash == orderHash {
				t.Errorf("order ids ord-7 and ord-8 hash alike: %s", orderHash)
			}

			for _, h := range []string{orderHash, blobHash} {
				if rec := keysJSON(t, p, "get", h); rec["state"] != "completed" || rec["status"] != float64(http.StatusCreated) {
					t.Errorf("keys get %s = %v, want the completed 201", h, rec)
				}
			}
		})
	}
}

// postAndLogged posts body to path without a key header, waits for the
// proxy's nth executed-request log line and returns its key_hash.
func postAndLogged(t *testing.T, p *proxyProc, path, body string, nth int) string {
	t.Helper()
	res, err := http.Post(p.URL()+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("POST %s: %d, want the upstream's 201", path, res.StatusCode)
	}
	// The line is written once the response is done, maybe after the
	// client has it; there is nothing to wait on but the log itself.
	var hashes []string
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		hashes = hashes[:0]
		sc := bufio.NewScanner(strings.NewReader(p.Logs()))
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == "request" && line["outcome"] == "executed" {
				kh, _ := line["key_hash"].(string)
				hashes = append(hashes, kh)
			}
		}
		if len(hashes) < nth {
			return fmt.Errorf("POST %s: %d executed-request log lines, want %d", path, len(hashes), nth)
		}
		return nil
	})
	if hashes[nth-1] == "" {
		t.Fatalf("POST %s: the executed-request log line has no key_hash", path)
	}
	return hashes[nth-1]
}
