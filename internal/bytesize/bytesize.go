// Package bytesize reads and writes sizes in bytes as the configuration
// and the proxy's answers write them: an integer, or an integer with a
// binary suffix, "512KiB", "10MiB", "2GiB". Decimal suffixes (KB, MB) are
// refused on purpose: "10MB" is ambiguous, and a 4.9% difference in a
// memory bound is the kind of surprise nobody wants.
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Binary size units.
const (
	KiB int64 = 1 << (10 * (iota + 1))
	MiB
	GiB
	TiB
)

var units = []struct {
	suffix string
	unit   int64
}{
	// Longest suffixes first so "MiB" is not read as "B".
	{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}, {"B", 1},
}

// Parse reads "1048576", "1024KiB", "1MiB", "512B" (suffix in any case,
// blanks allowed between number and suffix).
func Parse(s string) (int64, error) {
	text := strings.TrimSpace(s)
	unit := int64(1)
	for _, u := range units {
		if len(text) > len(u.suffix) && strings.EqualFold(text[len(text)-len(u.suffix):], u.suffix) {
			text = strings.TrimSpace(text[:len(text)-len(u.suffix)])
			unit = u.unit
			break
		}
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid size %q (want bytes, or a KiB, MiB or GiB suffix)", s)
	}
	if n > math.MaxInt64/unit {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return n * unit, nil
}

// Format writes n with the largest unit that divides it exactly, so every
// value reads back to itself: 10MiB, 1536KiB, 1000B, 0.
func Format(n int64) string {
	if n == 0 {
		return "0"
	}
	for _, u := range units[:len(units)-1] {
		if n%u.unit == 0 {
			return strconv.FormatInt(n/u.unit, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}
