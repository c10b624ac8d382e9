package jsonread

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// Pointer is an RFC 6901 pointer into a JSON document ("/data/object/id").
// Its zero value is the empty pointer, which names the whole document.
type Pointer struct {
	text   string
	tokens []string
	// index[i] is tokens[i] as an array index, or -1 when the token cannot
	// name an array element (leading zero, "-", not a number).
	index []int
}

// ParsePointer parses an RFC 6901 pointer: "" or "/"-separated
// reference tokens in which "~1" stands for "/" and "~0" for "~".
func ParsePointer(s string) (Pointer, error) {
	p := Pointer{text: s}
	if s == "" {
		return p, nil
	}
	if s[0] != '/' {
		return Pointer{}, fmt.Errorf("JSON pointer %q must start with \"/\" (RFC 6901), as in /id", s)
	}
	for _, raw := range strings.Split(s[1:], "/") {
		tok, err := unescapePointerToken(raw)
		if err != nil {
			return Pointer{}, fmt.Errorf("JSON pointer %q: %w", s, err)
		}
		p.tokens = append(p.tokens, tok)
		p.index = append(p.index, arrayIndex(tok))
	}
	return p, nil
}

var errPointerEscape = errors.New(`"~" must be followed by 0 (for "~") or 1 (for "/")`)

func unescapePointerToken(raw string) (string, error) {
	if strings.IndexByte(raw, '~') < 0 {
		return raw, nil
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '~' {
			b.WriteByte(c)
			continue
		}
		i++
		switch {
		case i < len(raw) && raw[i] == '0':
			b.WriteByte('~')
		case i < len(raw) && raw[i] == '1':
			b.WriteByte('/')
		default:
			return "", errPointerEscape
		}
	}
	return b.String(), nil
}

// arrayIndex is the RFC 6901 array index tok names, or -1: decimal digits
// without a leading zero, small enough that no body could reach it.
func arrayIndex(tok string) int {
	if tok == "" || len(tok) > 9 || (tok[0] == '0' && len(tok) > 1) {
		return -1
	}
	n := 0
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// String returns the pointer as it was written.
func (p Pointer) String() string { return p.text }

// IsRoot reports whether p is the empty pointer, which names the whole document.
func (p Pointer) IsRoot() bool { return len(p.tokens) == 0 }

// MarshalText returns the pointer as it was written.
func (p Pointer) MarshalText() ([]byte, error) { return []byte(p.text), nil }

// UnmarshalText parses an RFC 6901 pointer, as ParsePointer.
func (p *Pointer) UnmarshalText(text []byte) error {
	q, err := ParsePointer(string(text))
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// tokenMatchesKey reports whether the raw bytes of a JSON object key (between
// its quotes, escapes as sent) decode to tok.
func tokenMatchesKey(raw []byte, tok string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == tok
	}
	var scratch [64]byte
	return string(appendUnescaped(scratch[:0], raw)) == tok
}

// Find returns the value p names in the JSON text doc, as a slice of doc,
// or false when doc has no value there or is not JSON up to it. It reads
// only as far as the value's end: what follows is not looked at, so a
// truncated document still yields a value that precedes the cut. In an
// object with a repeated member name, the first one counts.
func (p Pointer) Find(doc []byte) ([]byte, bool) {
	i := skipWS(doc, 0)
	for d, tok := range p.tokens {
		if d >= MaxDepth || i >= len(doc) {
			return nil, false
		}
		switch doc[i] {
		case '{':
			i = findMember(doc, i, d, tok)
		case '[':
			i = findElement(doc, i, d, p.index[d])
		default:
			return nil, false
		}
		if i < 0 {
			return nil, false
		}
	}
	end := skipValue(doc, i, len(p.tokens))
	if end < 0 {
		return nil, false
	}
	return doc[i:end], true
}

// findMember returns the offset of the value of the member named tok in the
// object at doc[i], which sits inside depth containers, or -1.
func findMember(doc []byte, i, depth int, tok string) int {
	i = skipWS(doc, i+1)
	if i < len(doc) && doc[i] == '}' {
		return -1
	}
	for {
		if i >= len(doc) || doc[i] != '"' {
			return -1
		}
		end := scanString(doc, i)
		if end < 0 {
			return -1
		}
		match := tokenMatchesKey(doc[i+1:end-1], tok)
		if i = skipWS(doc, end); i >= len(doc) || doc[i] != ':' {
			return -1
		}
		i = skipWS(doc, i+1)
		if match {
			return i
		}
		if i = skipValue(doc, i, depth+1); i < 0 {
			return -1
		}
		if i = skipWS(doc, i); i >= len(doc) || doc[i] != ',' {
			return -1 // '}' ends the object without the member
		}
		i = skipWS(doc, i+1)
	}
}

// findElement returns the offset of element n of the array at doc[i], or -1.
func findElement(doc []byte, i, depth, n int) int {
	if n < 0 {
		return -1
	}
	i = skipWS(doc, i+1)
	if i < len(doc) && doc[i] == ']' {
		return -1
	}
	for ; n > 0; n-- {
		if i = skipValue(doc, i, depth+1); i < 0 {
			return -1
		}
		if i = skipWS(doc, i); i >= len(doc) || doc[i] != ',' {
			return -1
		}
		i = skipWS(doc, i+1)
	}
	return i
}
