package jsonread

import (
	"bytes"
	"math/bits"
	"slices"
	"sync"
)

// MaxIgnore is the most pointers AppendCanonical leaves out: one bit each
// in the mask that follows a value's path.
const MaxIgnore = 64

// AppendCanonical appends the canonical form of the JSON text body to
// dst, leaving out the values ignore points at: members are sorted by the
// bytes of their decoded names, whitespace between tokens is dropped, and
// every token is copied as sent. An ignored member is left out; an ignored
// array element is written as null, so that the array keeps its length
// ([] and ["x"] stay different when /0 is ignored). Ignored names match
// exactly, as RFC 6901 says: leaving out less keeps more in the
// fingerprint. At most MaxIgnore pointers are used.
//
// body must be what Validate accepts; otherwise dst comes back unchanged
// with Validate's error. A byte order mark before the text is kept, as
// sent: upstreams part on it (Go's encoding/json and Python's json.loads
// of a decoded string refuse the body, Node's body-parser drops the mark),
// so a body with one and the same body without are two requests.
func AppendCanonical(dst, body []byte, ignore []Pointer) ([]byte, error) {
	body, cut := trimBOM(body)
	c := canonicalizers.Get().(*canonicalizer)
	c.in, c.out, c.ignore = body, dst, ignore
	if cut > 0 {
		c.out = append(c.out, bom...)
	}
	c.reset()
	var mask uint64
	for k := range min(len(ignore), MaxIgnore) {
		if !ignore[k].IsRoot() {
			mask |= 1 << k
		}
	}
	i := c.value(skipWS(body, 0), 0, mask)
	// JSON is UTF-8 (RFC 8259 §8.1). Readers differ on other bytes —
	// encoding/json reads "\xff" as U+FFFD, so {"\xff":1,"\ufffd":2}
	// repeats a name for it — and the order of members would then carry a
	// meaning the canonical form drops. Checked last: a body that is not
	// JSON fails the scan at its first bytes.
	err := c.verdict(i, cut)
	out := c.out
	c.in, c.out, c.ignore = nil, nil, nil
	c.members = c.members[:0]
	if cap(c.tmp) <= 1<<20 && cap(c.members) <= 1<<14 && c.small() { // do not keep what one huge body grew
		canonicalizers.Put(c)
	}
	if err != nil {
		return out[:len(dst)], err
	}
	return out, nil
}

// canonicalizer holds the scratch space of one canonicalisation.
type canonicalizer struct {
	reader // the input, and the names of its objects
	out    []byte
	ignore []Pointer
	// members is a stack of the members of the objects being written,
	// innermost last.
	members []memberSpan
	// tmp holds an object's members while they are written back sorted.
	tmp []byte
	// nameA and nameB hold decoded member names being compared.
	nameA, nameB []byte
}

// memberSpan is one object member: its name in in (between the quotes) and
// its canonical `"name":value` in out.
type memberSpan struct {
	nameStart, nameEnd int
	start, end         int
	escaped            bool // the name has a backslash escape
}

var canonicalizers = sync.Pool{New: func() any { return new(canonicalizer) }}

// value writes the canonical form of the value at in[i], which sits inside
// depth containers; mask selects the ignore pointers whose leading tokens
// name this value's path. It returns the offset after the value, or -1.
func (c *canonicalizer) value(i, depth int, mask uint64) int {
	if i >= len(c.in) {
		return -1
	}
	switch c.in[i] {
	case '{':
		return c.object(i, depth, mask)
	case '[':
		return c.array(i, depth, mask)
	}
	end := scanScalar(c.in, i)
	if end < 0 {
		return -1
	}
	c.out = append(c.out, c.in[i:end]...)
	return end
}

func (c *canonicalizer) object(i, depth int, mask uint64) int {
	if depth >= MaxDepth {
		return -1
	}
	in := c.in
	c.out = append(c.out, '{')
	first := len(c.out)
	base := len(c.members)
	nameBase := len(c.stack)
	sorted := true
	if i = skipWS(in, i+1); i < len(in) && in[i] == '}' {
		c.out = append(c.out, '}')
		return i + 1
	}
	for {
		if i >= len(in) || in[i] != '"' {
			return -1
		}
		name := i
		if i = scanString(in, i); i < 0 {
			return -1
		}
		m := memberSpan{nameStart: name + 1, nameEnd: i - 1}
		c.push(in, m.nameStart, m.nameEnd)
		m.escaped = bytes.IndexByte(in[m.nameStart:m.nameEnd], '\\') >= 0
		var drop bool
		var child uint64
		if mask != 0 {
			drop, child = c.match(in[m.nameStart:m.nameEnd], -1, depth, mask)
		}
		if i = skipWS(in, i); i >= len(in) || in[i] != ':' {
			return -1
		}
		i = skipWS(in, i+1)
		if drop {
			i = c.skip(i, depth+1, false)
		} else {
			if len(c.members) > base {
				c.out = append(c.out, ',')
			}
			m.start = len(c.out)
			c.out = append(c.out, in[name:m.nameEnd+1]...)
			c.out = append(c.out, ':')
			if i = c.value(i, depth+1, child); i >= 0 {
				m.end = len(c.out)
				if sorted && len(c.members) > base && c.compare(c.members[len(c.members)-1], m) > 0 {
					sorted = false
				}
				c.members = append(c.members, m)
			}
		}
		if i < 0 {
			return -1
		}
		if i = skipWS(in, i); i >= len(in) {
			return -1
		}
		if in[i] == '}' {
			break
		}
		if in[i] != ',' {
			return -1
		}
		i = skipWS(in, i+1)
	}
	c.close(in, nameBase)
	if !sorted {
		c.sortMembers(first, c.members[base:])
	}
	c.members = c.members[:base]
	c.out = append(c.out, '}')
	return i + 1
}

// compare orders members by their decoded names. Names are unique (a text
// that repeats one is refused), so the order is total.
func (c *canonicalizer) compare(a, b memberSpan) int {
	if !a.escaped && !b.escaped {
		return bytes.Compare(c.in[a.nameStart:a.nameEnd], c.in[b.nameStart:b.nameEnd])
	}
	return c.compareDecoded(a, b)
}

func (c *canonicalizer) compareDecoded(a, b memberSpan) int {
	x, y := c.in[a.nameStart:a.nameEnd], c.in[b.nameStart:b.nameEnd]
	if a.escaped {
		c.nameA = appendUnescaped(c.nameA[:0], x)
		x = c.nameA
	}
	if b.escaped {
		c.nameB = appendUnescaped(c.nameB[:0], y)
		y = c.nameB
	}
	return bytes.Compare(x, y)
}

// sortMembers rewrites out[first:], the members ms separated by commas, in
// the order of their names.
func (c *canonicalizer) sortMembers(first int, ms []memberSpan) {
	if len(ms) <= 12 {
		// The objects of a request body are small: an insertion sort that
		// shifts, stable, beats the generic sort's swaps and calls.
		for i := 1; i < len(ms); i++ {
			m, j := ms[i], i
			for ; j > 0 && c.compare(ms[j-1], m) > 0; j-- {
				ms[j] = ms[j-1]
			}
			ms[j] = m
		}
	} else {
		slices.SortStableFunc(ms, c.compare)
	}
	c.tmp = append(c.tmp[:0], c.out[first:]...)
	c.out = c.out[:first]
	for j, m := range ms {
		if j > 0 {
			c.out = append(c.out, ',')
		}
		c.out = append(c.out, c.tmp[m.start-first:m.end-first]...)
	}
}

func (c *canonicalizer) array(i, depth int, mask uint64) int {
	if depth >= MaxDepth {
		return -1
	}
	in := c.in
	c.out = append(c.out, '[')
	if i = skipWS(in, i+1); i < len(in) && in[i] == ']' {
		c.out = append(c.out, ']')
		return i + 1
	}
	for n := 0; ; n++ {
		var drop bool
		var child uint64
		if mask != 0 {
			drop, child = c.match(nil, n, depth, mask)
		}
		if n > 0 {
			c.out = append(c.out, ',')
		}
		if drop {
			c.out = append(c.out, "null"...) // the element is there
			i = c.skip(i, depth+1, false)
		} else {
			i = c.value(i, depth+1, child)
		}
		if i < 0 {
			return -1
		}
		if i = skipWS(in, i); i >= len(in) {
			return -1
		}
		if in[i] == ']' {
			break
		}
		if in[i] != ',' {
			return -1
		}
		i = skipWS(in, i+1)
	}
	c.out = append(c.out, ']')
	return i + 1
}

// match applies the ignore pointers in mask to the member named name (n < 0)
// or to array element n of a container inside depth
// containers: drop when one of them ends there, child the pointers that
// go on into its value.
func (c *canonicalizer) match(name []byte, n, depth int, mask uint64) (drop bool, child uint64) {
	for m := mask; m != 0; m &= m - 1 {
		k := bits.TrailingZeros64(m)
		p := &c.ignore[k]
		if n < 0 && !tokenMatchesKey(name, p.tokens[depth]) || n >= 0 && p.index[depth] != n {
			continue
		}
		if depth == len(p.tokens)-1 {
			drop = true
		} else {
			child |= 1 << k
		}
	}
	return drop, child
}
