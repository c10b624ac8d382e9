package jsonread

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Pointer is an RFC 6901 pointer into a JSON document ("/data/object/id").
// Its zero value is the empty pointer, which names the whole document.
type Pointer struct {
	text   string
	tokens []string
	// index[i] is tokens[i] as an array index, or -1 when the token cannot
	// name an array element (leading zero, "-", not a number).
	index []int
	// folded[i] is tokens[i] folded as member names are compared.
	folded []string
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
		p.folded = append(p.folded, string(appendFolded(nil, []byte(tok))))
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

// nameFolds reports whether the raw bytes of a JSON object key decode to a
// name that folds to folded.
func nameFolds(raw []byte, folded string) bool {
	// Decoding and folding never lengthen a name, so a shorter raw name
	// cannot match; one of plain ASCII is compared as it stands.
	if len(raw) < len(folded) {
		return false
	}
	plain := true
	for _, c := range raw {
		if c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain {
		if len(raw) != len(folded) {
			return false
		}
		for i, c := range raw {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			if c != folded[i] {
				return false
			}
		}
		return true
	}
	var dec, out [64]byte
	if bytes.IndexByte(raw, '\\') >= 0 {
		raw = appendUnescaped(dec[:0], raw)
	}
	return string(appendFolded(out[:0], raw)) == folded
}

// Find returns the value p names in doc, as a slice of doc. The whole of
// doc must be one JSON text with unique member names (Validate), or Find
// returns Validate's error; ErrNotFound when doc has no value there.
//
// A member is matched to its token case-insensitively, as encoding/json
// matches a name to a struct field: names being unique, at most one member
// can match, and a Go upstream reads {"ID":"x"} as an id.
func (p Pointer) Find(doc []byte) ([]byte, error) {
	if len(p.tokens) > MaxDepth {
		if err := Validate(doc); err != nil {
			return nil, err
		}
		return nil, ErrNotFound // no value nests that deep
	}
	v, err := read(doc, &p)
	if err == nil && v == nil {
		err = ErrNotFound
	}
	return v, err
}
