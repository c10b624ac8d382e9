package config

import (
	"strings"

	"github.com/idempotency-proxy/idempotency-proxy/internal/enum"
)

// didYouMean returns "; did you mean X?" for the known name closest to
// name, or "" when none is close.
func didYouMean(name string, known []string, sep string) string {
	if s := suggest(name, known, sep); s != "" {
		return "; did you mean " + s + "?"
	}
	return ""
}

// suggest returns the known name closest to name, or "" when none is
// close: a typo of it (enum.Nearest), or else the first known name that
// name is a prefix of up to sep (a mapping given where one of its keys was
// meant, as in IDEMPOTENCY_PROXY_UPSTREAM).
func suggest(name string, known []string, sep string) string {
	if best := enum.Nearest(name, known); best != "" {
		return best
	}
	for _, k := range known {
		if strings.HasPrefix(k, name+sep) {
			return k
		}
	}
	return ""
}
