package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Size is a number of bytes. In the configuration it is an integer (bytes) or
// an integer with a binary suffix: "512KiB", "10MiB", "2GiB". Decimal
// suffixes (KB, MB) are rejected on purpose: "10MB" is ambiguous and a
// 4.9% difference in a memory bound is the kind of surprise nobody wants.
type Size int64

// Binary size units.
const (
	B   Size = 1
	KiB      = 1024 * B
	MiB      = 1024 * KiB
	GiB      = 1024 * MiB
	TiB      = 1024 * GiB
)

var sizeUnits = []struct {
	suffix string
	unit   Size
}{
	// Longest suffixes first so "MiB" is not read as "B".
	{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}, {"B", B},
}

var errSize = errors.New("invalid size")

// ParseSize parses "1048576", "1024KiB", "1MiB" (suffix case-insensitive,
// blanks allowed between number and suffix).
func ParseSize(s string) (Size, error) {
	text := strings.TrimSpace(s)
	unit := B
	for _, u := range sizeUnits {
		if len(text) > len(u.suffix) && strings.EqualFold(text[len(text)-len(u.suffix):], u.suffix) {
			text = strings.TrimSpace(text[:len(text)-len(u.suffix)])
			unit = u.unit
			break
		}
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w %q (want bytes, or a KiB, MiB or GiB suffix)", errSize, s)
	}
	if n > math.MaxInt64/int64(unit) {
		return 0, fmt.Errorf("%w %q: too large", errSize, s)
	}
	return Size(n) * unit, nil
}

// String formats s with the largest unit that divides it exactly, so every
// value reads back to itself: 10MiB, 1536KiB, 1000.
func (s Size) String() string {
	if s == 0 {
		return "0"
	}
	for _, u := range sizeUnits[:len(sizeUnits)-1] {
		if s%u.unit == 0 {
			return strconv.FormatInt(int64(s/u.unit), 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// MarshalText implements encoding.TextMarshaler.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}
