package proxy

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// StatusTTL keeps some recorded responses for another time than the
// policy's TTL: its keys are a status ("404") or a class ("5xx"), its
// values how long a response with that status is replayed. The most
// specific key wins: a status before its class, the class before TTL.
type StatusTTL map[string]time.Duration

// MarshalText writes s as the configuration view shows it,
// "{404: 10m0s, 5xx: 1m0s}", keys in order.
func (s StatusTTL) MarshalText() ([]byte, error) {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ": " + s[k].String()
	}
	return []byte("{" + strings.Join(parts, ", ") + "}"), nil
}

// checkStatusKey says what is wrong with a key of StatusTTL, or "".
func checkStatusKey(k string) string {
	if len(k) == 3 && k[0] >= '1' && k[0] <= '5' {
		if k[1:] == "xx" {
			return ""
		}
		if isDigit(k[1]) && isDigit(k[2]) {
			return ""
		}
	}
	return fmt.Sprintf("invalid status %q (want a status 100..599 or a class 1xx..5xx)", k)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// ttlFor is how long a recorded response with status is kept: the most
// specific entry of StatusTTL, else TTL. Without StatusTTL it costs a
// length check.
func (p *Policy) ttlFor(status int) time.Duration {
	if len(p.StatusTTL) == 0 || status < 100 || status > 599 {
		return p.TTL
	}
	b := [3]byte{byte('0' + status/100), byte('0' + status/10%10), byte('0' + status%10)}
	if d, ok := p.StatusTTL[string(b[:])]; ok {
		return d
	}
	b[1], b[2] = 'x', 'x'
	if d, ok := p.StatusTTL[string(b[:])]; ok {
		return d
	}
	return p.TTL
}
