// Package acceptenc reads a request's Accept-Encoding (RFC 9110, section
// 12.5.3): whether the client accepts a body in a given content coding.
// It knows nothing of records or replays; the proxy decodes a replay over
// it (docs/request-handling.md, "Replays and content codings").
package acceptenc

import "strings"

// Accepts reports whether a request whose Accept-Encoding field lines are
// fields accepts a body in the content coding c ("gzip", "deflate",
// "identity"…), compared case-insensitively, with "x-gzip" read as "gzip"
// (RFC 9110, section 8.4.1.3).
//
// A coding listed with a weight above 0 is accepted; one listed with q=0
// is not, whatever else the field says; one not listed is accepted when
// "*" is, with a weight above 0. A member whose weight cannot be read is
// left out. "identity" is accepted unless refused by name or by "*;q=0"
// (section 12.5.3).
//
// A request without the field accepts no coding but identity. RFC 9110
// reads its absence as "anything", but clients that send none (curl
// without --compressed, most HTTP libraries asked for nothing) read only
// plain bodies, which is why servers, Go's transport and nginx's gunzip
// module send none to them. An empty field says the same, by the RFC too.
//
// It does not allocate.
func Accepts(fields []string, c string) bool {
	identity := strings.EqualFold(c, "identity")
	named, star := weight(fields, c)
	switch {
	case named != unlisted:
		return named == positive
	case star != unlisted:
		return star == positive
	default:
		return identity
	}
}

// A listing is what a field says of a coding: nothing, or its weight.
type listing uint8

const (
	unlisted listing = iota
	positive         // listed, every time with a weight above 0
	refused          // listed at least once with q=0
)

// weight reads fields' members: what they say of the coding c (named),
// and of "*" (star).
func weight(fields []string, c string) (named, star listing) {
	for _, f := range fields {
		for f != "" {
			var member string
			member, f, _ = strings.Cut(f, ",")
			name, params, _ := strings.Cut(member, ";")
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			var l *listing
			switch {
			case name == "*":
				l = &star
			case same(name, c):
				l = &named
			default:
				continue
			}
			pos, ok := qPositive(params)
			switch {
			case !ok:
			case !pos:
				*l = refused
			case *l == unlisted:
				*l = positive
			}
		}
	}
	return named, star
}

// same reports whether the codings a and b are one: equal but for case,
// or gzip and x-gzip.
func same(a, b string) bool {
	return strings.EqualFold(a, b) || isGzip(a) && isGzip(b)
}

func isGzip(s string) bool { return strings.EqualFold(s, "gzip") || strings.EqualFold(s, "x-gzip") }

// qPositive reads a member's parameters (what follows its first ";") and
// reports whether its weight is above 0, which it is when none is given;
// ok is false when the weight cannot be read. Parameters other than q are
// skipped.
func qPositive(params string) (pos, ok bool) {
	pos, ok = true, true
	for params != "" {
		var p string
		p, params, _ = strings.Cut(params, ";")
		k, v, _ := strings.Cut(p, "=")
		if !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		pos, ok = readQ(strings.TrimSpace(v))
	}
	return pos, ok
}

// readQ reads a weight, RFC 9110 section 12.4.2: "0" or "1", a "." and
// up to three digits (only zeros after a 1).
func readQ(v string) (pos, ok bool) {
	if v == "" || v[0] != '0' && v[0] != '1' {
		return false, false
	}
	whole, frac := v[0], v[1:]
	if frac != "" {
		if frac[0] != '.' || len(frac) > 4 {
			return false, false
		}
		frac = frac[1:]
	}
	nonzero := false
	for i := 0; i < len(frac); i++ {
		switch d := frac[i]; {
		case d < '0' || d > '9':
			return false, false
		case d != '0' && whole == '1':
			return false, false
		case d != '0':
			nonzero = true
		}
	}
	return whole == '1' || nonzero, true
}
