package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

const (
	fillerPrefix  = "filler:" // not the proxy's key prefix
	fillerValue   = 64 << 10  // bytes per filler key
	maxFillerKeys = 1000      // far more than a few MiB of maxmemory takes: a bound on the loop
)

// fillRedis writes filler keys under fillerPrefix until Redis refuses one
// for lack of memory, and returns their names.
//
// Redis refuses a write when its memory use, counting the command's own
// arguments, is over maxmemory. Right after the first refusal a smaller
// write may still fit: Redis is full for a large record but perhaps not
// for a small one. pushPastMaxmemory makes it full for every write.
func fillRedis(t *testing.T, rdb *redis.Client) []string {
	t.Helper()
	ctx := context.Background()
	value := strings.Repeat("f", fillerValue)
	var keys []string
	for i := range maxFillerKeys {
		k := fmt.Sprintf("%s%d", fillerPrefix, i)
		err := rdb.Set(ctx, k, value, 0).Err()
		if isOOM(err) {
			return keys
		}
		if err != nil {
			t.Fatalf("fill Redis: SET %s: %v", k, err)
		}
		keys = append(keys, k)
	}
	t.Fatalf("Redis took %d filler keys of %d bytes without refusing one: is maxmemory set?", maxFillerKeys, fillerValue)
	return nil
}

// pushPastMaxmemory writes overshootKeys more filler keys with a script
// flagged allow-oom, which Redis runs whatever its memory: Redis then uses
// more than maxmemory and refuses every write — a lease, a record without
// its body — however its connection buffers grow and shrink. It returns
// the keys' names.
func pushPastMaxmemory(t *testing.T, rdb *redis.Client) []string {
	t.Helper()
	ctx := context.Background()
	keys := make([]string, overshootKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%sover:%d", fillerPrefix, i)
	}
	if err := overshoot.Run(ctx, rdb, keys, fillerValue).Err(); err != nil {
		t.Fatalf("fill Redis past maxmemory: %v", err)
	}
	if err := rdb.Set(ctx, fillerPrefix+"probe", "x", 0).Err(); !isOOM(err) {
		t.Fatalf("Redis filled past maxmemory still takes a one-byte write (error %v)", err)
	}
	return keys
}

// overshoot sets each of KEYS to ARGV[1] bytes, whatever memory Redis has.
var overshoot = redis.NewScript(`#!lua flags=allow-oom
local v = string.rep('f', tonumber(ARGV[1]))
for _, k in ipairs(KEYS) do redis.call('SET', k, v) end
return #KEYS`)

// overshootKeys of fillerValue bytes put Redis 1 MiB past maxmemory: more
// than the connection buffers it could free.
const overshootKeys = (1 << 20) / fillerValue

// isOOM reports Redis's refusal of a write for lack of memory.
func isOOM(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "OOM ") }

// getReadyz fetches p's /readyz.
func getReadyz(t *testing.T, p *proxyProc) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	res, err := c.Get(p.AdminURL() + "/readyz")
	if err != nil {
		t.Fatalf("%s /readyz: %v", p.name, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s /readyz: %v", p.name, err)
	}
	return res.StatusCode, string(b)
}

// waitLogLine waits until p has logged a line at level whose message
// starts with msg, and returns it decoded.
func waitLogLine(t *testing.T, p *proxyProc, level, msg string) map[string]any {
	t.Helper()
	var line map[string]any
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if line = findLogLine(p.Logs(), level, msg); line == nil {
			return fmt.Errorf("%s logged no %s line starting %q", p.name, level, msg)
		}
		return nil
	})
	return line
}

// findLogLine returns the first JSON log line in logs at level whose
// message starts with msg, or nil.
func findLogLine(logs, level, msg string) map[string]any {
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		if m, _ := line["msg"].(string); line["level"] == level && strings.HasPrefix(m, msg) {
			return line
		}
	}
	return nil
}
