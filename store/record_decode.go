package store

import (
	"encoding/binary"
	"fmt"
)

// decoder reads an encoded record. After the first error every read returns
// a zero value, so callers check d.err once at the end of a section.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(msg string) error {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s at offset %d", ErrCorrupt, msg, d.off)
	}
	return d.err
}

func (d *decoder) byte() byte {
	if d.err != nil || d.off >= len(d.b) {
		d.fail("truncated")
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.off += n
	return x
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.off += n
	return x
}

// length reads a uvarint that counts bytes or items still to come; each item
// takes at least one byte, so a count above the remaining input is corrupt.
func (d *decoder) length() int {
	x := d.uvarint()
	if d.err == nil && x > uint64(len(d.b)-d.off) {
		d.fail("length exceeds input")
		return 0
	}
	return int(x)
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b)-d.off {
		d.fail("truncated")
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

// headers decodes the header section, which runs to the end of the input.
// Names and values are slices of one string copied from that section, and
// the value lists share one backing array: three allocations plus the map.
func (d *decoder) headers(rec *Record) error {
	nnames := d.length()
	nvalues := d.length()
	if d.err != nil {
		return d.err
	}
	if nnames == 0 {
		if nvalues != 0 {
			return d.fail("values without names")
		}
		return nil
	}
	start := d.off
	s := string(d.b[start:])
	str := func() string {
		n := d.length()
		if d.err != nil {
			return ""
		}
		v := s[d.off-start : d.off-start+n]
		d.off += n
		return v
	}
	rec.Header = make(map[string][]string, nnames)
	vals := make([]string, nvalues)
	used := 0
	for range nnames {
		name := str()
		count := d.length()
		if d.err != nil {
			return d.err
		}
		if count > nvalues-used {
			return d.fail("more values than announced")
		}
		if _, dup := rec.Header[name]; dup {
			return d.fail("duplicate header name")
		}
		list := vals[used : used+count : used+count]
		for i := range list {
			list[i] = str()
		}
		used += count
		if d.err != nil {
			return d.err
		}
		rec.Header[name] = list
	}
	if used != nvalues {
		return d.fail("fewer values than announced")
	}
	return nil
}
