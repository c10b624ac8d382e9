package jsonread

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"
)

var (
	// ErrNotJSON means a body is not one JSON text in UTF-8 (RFC 8259), or
	// nests deeper than MaxDepth.
	ErrNotJSON = errors.New("not one JSON text")
	// ErrNotFound means a JSON text has no value where a pointer points.
	ErrNotFound = errors.New("no value at the JSON pointer")
	// ErrDuplicateName means a JSON text is valid but an object in it
	// repeats a member name, compared case-insensitively: readers differ on
	// what such a text says. The error is a *DuplicateNameError.
	ErrDuplicateName = errors.New("a JSON object repeats a member name")
)

// DuplicateNameError is a member name that repeats in an object.
type DuplicateNameError struct {
	Name   string // the name as its later member spells it, decoded
	Offset int    // of that member's opening quote in the body
}

func (e *DuplicateNameError) Error() string {
	name := e.Name
	if len(name) > 64 {
		name = name[:64] + "…"
	}
	return fmt.Sprintf("the member name %q repeats in an object at byte %d (names are compared case-insensitively)", name, e.Offset)
}

// Is makes errors.Is(err, ErrDuplicateName) true.
func (e *DuplicateNameError) Is(target error) bool { return target == ErrDuplicateName }

// bom is the UTF-8 byte order mark, which a reader ignores before a JSON
// text (RFC 8259 §8.1 lets it).
var bom = []byte("\xef\xbb\xbf")

// trimBOM returns doc without a leading byte order mark, and the length
// of what it cut.
func trimBOM(doc []byte) ([]byte, int) {
	if bytes.HasPrefix(doc, bom) {
		return doc[len(bom):], len(bom)
	}
	return doc, 0
}

// reader checks a whole JSON text: its grammar, its depth, and the names
// of its objects.
type reader struct {
	in []byte
	names
	// ptr, when follow is set, is followed while reading: the value it
	// names is in[found:foundEnd] (found < 0: none).
	ptr             Pointer
	follow          bool
	found, foundEnd int
}

var readers = sync.Pool{New: func() any { return new(reader) }}

// Validate returns nil when doc is one JSON text in UTF-8 (a leading byte
// order mark aside) nesting no deeper than MaxDepth, whose objects have
// unique member names; ErrNotJSON when it is not JSON; a
// *DuplicateNameError when it is but repeats a name.
func Validate(doc []byte) error {
	_, err := read(doc, nil)
	return err
}

// read checks doc as Validate does and returns the value p names in it
// (nil: none, or p is nil).
func read(doc []byte, p *Pointer) ([]byte, error) {
	doc, cut := trimBOM(doc)
	r := readers.Get().(*reader)
	if p != nil {
		r.ptr, r.follow = *p, true
	}
	err := r.check(doc, cut)
	var v []byte
	if err == nil && r.found >= 0 {
		v = doc[r.found:r.foundEnd]
	}
	r.in, r.ptr, r.follow = nil, Pointer{}, false
	if r.small() {
		readers.Put(r)
	}
	return v, err
}

func (r *reader) check(doc []byte, cut int) error {
	r.in = doc
	r.reset()
	r.found = -1
	i := r.skip(skipWS(doc, 0), 0, r.follow)
	return r.verdict(i, cut)
}

// verdict is the outcome of reading r.in up to i, the end of its value.
func (r *reader) verdict(i, cut int) error {
	if i < 0 || skipWS(r.in, i) != len(r.in) || !utf8.Valid(r.in) {
		return ErrNotJSON
	}
	if r.dupAt >= 0 {
		return &DuplicateNameError{Name: string(appendUnescaped(nil, r.in[r.dupS:r.dupE])), Offset: r.dupAt + cut}
	}
	return nil
}

// skip reads the value at in[i], which sits inside depth containers,
// noting the names of its objects. on says the value is on r.ptr's path,
// its first depth tokens matched.
func (r *reader) skip(i, depth int, on bool) int {
	b := r.in
	if i >= len(b) {
		return -1
	}
	if on && depth == len(r.ptr.tokens) {
		end := r.skip(i, depth, false)
		r.found, r.foundEnd = i, end
		return end
	}
	switch b[i] {
	case '{':
		if depth >= MaxDepth {
			return -1
		}
		base := len(r.stack)
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return -1
			}
			name := i
			if i = scanString(b, i); i < 0 {
				return -1
			}
			r.push(b, name+1, i-1)
			child := on && nameFolds(b[name+1:i-1], r.ptr.folded[depth])
			if i = skipWS(b, i); i >= len(b) || b[i] != ':' {
				return -1
			}
			if i = r.skip(skipWS(b, i+1), depth+1, child); i < 0 {
				return -1
			}
			if i = skipWS(b, i); i >= len(b) {
				return -1
			}
			switch b[i] {
			case '}':
				r.close(b, base)
				return i + 1
			case ',':
				i = skipWS(b, i+1)
			default:
				return -1
			}
		}
	case '[':
		if depth >= MaxDepth {
			return -1
		}
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1
		}
		for n := 0; ; n++ {
			if i = r.skip(i, depth+1, on && n == r.ptr.index[depth]); i < 0 {
				return -1
			}
			if i = skipWS(b, i); i >= len(b) {
				return -1
			}
			switch b[i] {
			case ']':
				return i + 1
			case ',':
				i = skipWS(b, i+1)
			default:
				return -1
			}
		}
	}
	return scanScalar(b, i)
}
