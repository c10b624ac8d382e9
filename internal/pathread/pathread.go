// Package pathread reads a request's escaped path as RFC 3986 and the
// servers in front of an upstream read it: its normal form (Normal), the
// other reading of a path that can be read two ways (Split), the path Go's
// ServeMux matches (Clean) and a last segment's format suffix
// (WithoutFormatSuffix). It knows nothing of routes or requests; the proxy
// reads methods and routes over it (docs/request-handling.md, "Paths and
// methods").
package pathread

import (
	"path"
	"strings"
)

// Normal returns the escaped path p in RFC 3986 normal form (section
// 6.2.2) — unreserved characters decoded (%63 is c, %2E is .), other
// escapes upper-cased, dot segments removed — and whether p can be read
// two ways (odd): an encoded slash or backslash (%2F, %5C), a backslash,
// a ";" path parameter (%3B too), a segment ending in encoded whitespace
// (%20, %09), or dot segments that RFC 3986 and slash-merging servers
// resolve differently (next to empty segments, or last). A path already
// in normal form is returned as it is, without allocating.
func Normal(p string) (norm string, odd bool) {
	if p == "" || p[0] != '/' {
		return p, false // "*" (OPTIONS *), or nothing to normalise
	}
	escapes, dots := false, false
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '%':
			escapes = true
			if i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]) {
				switch b := unhex(p[i+1])<<4 | unhex(p[i+2]); b {
				case '/', '\\', ';':
					odd = true
				case ' ', '\t':
					odd = odd || endsSegment(p, i+3)
				}
			}
		case ';', '\\':
			odd = true
		case '.':
			if p[i-1] == '/' {
				dots = true
			}
		}
	}
	if !escapes && !dots {
		return p, odd
	}
	norm = p
	if escapes {
		norm = decodeUnreserved(p)
	}
	if hasDotSegment(norm) {
		before := norm
		norm = removeDotSegments(norm)
		// A slash-merging server (Go's ServeMux, nginx) merges first and
		// resolves dots after, and drops the slash a final dot segment
		// leaves: "/a//../b" is "/b" there, "/a/b" here; "/a/." is "/a"
		// there, "/a/" here.
		if Clean(before) != Clean(norm) {
			odd = true
		}
	}
	return norm, odd
}

// endsSegment reports whether only encoded spaces and tabs stand between
// p[i:] and the end of its segment: a segment ending in whitespace, which
// IIS and ASP.NET trim (/v1/charges%20 is /v1/charges there).
func endsSegment(p string, i int) bool {
	for ; i < len(p) && p[i] != '/'; i += 3 {
		if p[i] != '%' || i+2 >= len(p) || !(p[i+1] == '2' && p[i+2] == '0' || p[i+1] == '0' && p[i+2] == '9') {
			return false
		}
	}
	return true
}

// decodeUnreserved decodes the percent-escapes of RFC 3986 unreserved
// characters (ALPHA, DIGIT, "-", ".", "_", "~") and upper-cases the hex
// digits of the others: escapes every upstream reads alike.
func decodeUnreserved(p string) string {
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c != '%' || i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
			b.WriteByte(c)
			continue
		}
		d := unhex(p[i+1])<<4 | unhex(p[i+2])
		if unreserved(d) {
			b.WriteByte(d)
		} else {
			b.WriteByte('%')
			b.WriteByte(upperHex(p[i+1]))
			b.WriteByte(upperHex(p[i+2]))
		}
		i += 2
	}
	return b.String()
}

// hasDotSegment reports whether p has a "." or ".." segment.
func hasDotSegment(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] != '/' {
			continue
		}
		j := i + 1
		for j < len(p) && p[j] == '.' {
			j++
		}
		if n := j - i - 1; (n == 1 || n == 2) && (j == len(p) || p[j] == '/') {
			return true
		}
	}
	return false
}

// removeDotSegments is RFC 3986 section 5.2.4 on an absolute path: "."
// segments go, ".." takes the segment before it with it, never above the
// root; empty segments are kept.
func removeDotSegments(p string) string {
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/")
}

// Clean is the path Go's ServeMux matches: path.Clean, keeping a
// trailing slash.
func Clean(p string) string {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		if c == p[:len(p)-1] {
			return p // clean already: no allocation
		}
		c += "/"
	}
	return c
}

// Split is the other reading of an odd path (Normal): encoded slashes and
// backslashes, and backslashes, as path separators, ";" path parameters
// (encoded too) dropped from their segments, and whitespace ending a
// segment trimmed, as servlet containers, Spring, IIS and decoding
// frameworks read them.
func Split(p string) string {
	var b strings.Builder
	b.Grow(len(p))
	param := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]) {
			switch d := unhex(p[i+1])<<4 | unhex(p[i+2]); {
			case d == '/' || d == '\\':
				c = '/'
				i += 2
			case d == ';':
				c = ';'
				i += 2
			case (d == ' ' || d == '\t') && endsSegment(p, i+3):
				i += 2
				continue // trimmed
			}
		}
		switch {
		case c == '/' || c == '\\':
			param = false
			b.WriteByte('/')
		case c == ';':
			param = true
		case !param:
			b.WriteByte(c)
		}
	}
	norm, _ := Normal(b.String())
	return norm
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

func upperHex(c byte) byte {
	if 'a' <= c && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}

// WithoutFormatSuffix returns the normal path p without the format suffix
// its last segment ends in — a dot and one to ten ASCII letters or digits
// after a name: "/v1/charges" for "/v1/charges.json" — and whether it
// had one.
func WithoutFormatSuffix(p string) (string, bool) {
	dot := strings.LastIndexByte(p, '.')
	if dot < 0 || dot == len(p)-1 || len(p)-dot > 11 || p[dot-1] == '/' {
		return p, false
	}
	for i := dot + 1; i < len(p); i++ {
		if c := p[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return p, false // a "/" after the dot too: not the last segment
		}
	}
	return p[:dot], true
}
