package jsonread

import (
	"bytes"
	"slices"
	"unicode"
	"unicode/utf8"
)

// Member names must be unique within each object, compared the way Go's
// encoding/json matches a name to a struct field: case-insensitively, by
// simple Unicode folding ("ID" is "id", the Kelvin sign "K" is "k").
// Parsers disagree on which of two such members counts — the first, the
// last, or both for a case-sensitive one — so a body that repeats a name
// can be read as two operations: the proxy refuses it (RFC 7493 asks
// senders for unique names).

// nameKey is one member name of an object being read.
type nameKey struct {
	hash       uint64 // of the name decoded and folded
	start, end int    // the name in the input, between its quotes
}

// names checks the member names of the objects being read. Its buffers are
// kept from one body to the next, so a check allocates nothing once warm.
type names struct {
	stack      []nameKey // the names of the open objects, innermost last
	sorted     []nameKey
	fa, fb     []byte // folded names being compared
	dec        []byte // a name being decoded
	dupAt      int    // offset of a repeated name's opening quote, or -1
	dupS, dupE int    // that name, between its quotes
}

// small reports whether n's buffers are worth keeping for another body:
// one huge body must not leave its buffers in a pool.
func (n *names) small() bool {
	return cap(n.stack) <= 1<<14 && cap(n.sorted) <= 1<<14 && cap(n.fa) <= 1<<16 && cap(n.fb) <= 1<<16 && cap(n.dec) <= 1<<16
}

func (n *names) reset() {
	n.stack = n.stack[:0]
	n.dupAt = -1
}

// push adds the name in[start:end] to the innermost open object.
func (n *names) push(in []byte, start, end int) {
	n.stack = append(n.stack, nameKey{hash: n.hash(in[start:end]), start: start, end: end})
}

// close checks the names of the object whose names start at stack[base]
// and drops them.
func (n *names) close(in []byte, base int) {
	ms := n.stack[base:]
	if len(ms) > 1 && n.dupAt < 0 {
		if len(ms) <= 16 {
			for i := 1; i < len(ms); i++ {
				for j := range i {
					if ms[i].hash == ms[j].hash && n.equal(in, ms[i], ms[j]) {
						n.repeated(ms[i])
						break
					}
				}
			}
		} else {
			n.closeLarge(in, ms)
		}
	}
	n.stack = n.stack[:base]
}

// closeLarge finds a repeated name among many by sorting their hashes.
func (n *names) closeLarge(in []byte, ms []nameKey) {
	n.sorted = append(n.sorted[:0], ms...)
	slices.SortFunc(n.sorted, func(a, b nameKey) int {
		switch {
		case a.hash < b.hash:
			return -1
		case a.hash > b.hash:
			return 1
		}
		return a.start - b.start
	})
	s := n.sorted
	for i := 0; i < len(s); {
		j := i + 1
		for j < len(s) && s[j].hash == s[i].hash {
			j++
		}
		for a := i; a < j; a++ { // names with one hash: all pairs
			for b := a + 1; b < j; b++ {
				if n.equal(in, s[a], s[b]) {
					n.repeated(s[b])
					return
				}
			}
		}
		i = j
	}
}

func (n *names) repeated(k nameKey) {
	if n.dupAt < 0 {
		n.dupAt, n.dupS, n.dupE = k.start-1, k.start, k.end
	}
}

func (n *names) equal(in []byte, a, b nameKey) bool {
	n.fa = n.fold(n.fa[:0], in[a.start:a.end])
	n.fb = n.fold(n.fb[:0], in[b.start:b.end])
	return bytes.Equal(n.fa, n.fb)
}

// fold appends the decoded, folded form of the raw name to dst.
func (n *names) fold(dst, raw []byte) []byte {
	if bytes.IndexByte(raw, '\\') >= 0 {
		n.dec = appendUnescaped(n.dec[:0], raw)
		raw = n.dec
	}
	return appendFolded(dst, raw)
}

// hash is FNV-1a over the folded form of the raw name.
func (n *names) hash(raw []byte) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for _, c := range raw {
		if c == '\\' || c >= utf8.RuneSelf {
			goto folded
		}
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		h = (h ^ uint64(c)) * prime
	}
	return h
folded: // escapes or non-ASCII: decode and fold first
	h = offset
	n.fa = n.fold(n.fa[:0], raw)
	for _, c := range n.fa {
		h = (h ^ uint64(c)) * prime
	}
	return h
}

// appendFolded appends s folded as encoding/json folds a name before it
// matches it to a field (foldName in encoding/json/fold.go): each rune
// replaced by the smallest rune of its simple folding orbit, so two names
// fold alike exactly when bytes.EqualFold says they are equal.
func appendFolded(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		dst = utf8.AppendRune(dst, foldRune(r))
		i += size
	}
	return dst
}

// foldRune returns the smallest rune of r's simple folding orbit.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}
