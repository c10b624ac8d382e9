package store

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
	"unsafe"
)

// DecodeRecord decodes an encoded record. Every length is checked against
// the input, so corrupt input yields an error wrapping ErrCorrupt, never a
// panic or an oversized allocation. The returned Body, header names and
// header values alias b: callers pass a buffer they never modify again.
func DecodeRecord(b []byte) (*Record, error) {
	d := decoder{b: b}
	version := d.byte()
	if version != recordVersion && version != recordVersionTrailers {
		return nil, d.fail(fmt.Sprintf("unknown version %d", version))
	}
	flags := d.byte()
	if flags&^knownFlags != 0 {
		return nil, d.fail(fmt.Sprintf("unknown flags %#x", flags))
	}
	var rec Record
	var sealed *Sealed
	rec.BodyOmitted = flags&flagBodyOmitted != 0
	status := d.uvarint()
	if status > math.MaxInt32 {
		return nil, d.fail("status out of range")
	}
	rec.Status = int(status)
	copy(rec.Fingerprint[:], d.bytes(len(rec.Fingerprint)))
	if flags&flagCreatedAt != 0 {
		rec.CreatedAt = time.UnixMilli(d.varint()).UTC()
	}
	if flags&flagRequest != 0 {
		rec.Request = d.request()
	}
	if flags&flagLookup != 0 {
		copy(rec.Lookup.Key[:], d.bytes(len(rec.Lookup.Key)))
		copy(rec.Lookup.Scope[:], d.bytes(len(rec.Lookup.Scope)))
	}
	if flags&flagSealed != 0 {
		sealed = d.sealed()
	}
	if body := d.bytes(d.length()); len(body) > 0 {
		if rec.BodyOmitted || sealed != nil {
			return nil, d.fail("body present on a record with body omitted or sealed")
		}
		rec.Body = body[:len(body):len(body)]
	}
	if version == recordVersionTrailers {
		rec.Trailer = d.trailers()
		if d.err == nil && (len(rec.Trailer) == 0 || sealed != nil) {
			return nil, d.fail("trailer section empty or on a sealed record")
		}
	}
	if sealed != nil {
		return d.sealedEnd(&rec, sealed)
	}
	out, err := d.headers(&rec)
	if err != nil {
		return nil, err
	}
	if d.err == nil && d.off != len(d.b) {
		return nil, d.fail("trailing bytes")
	}
	if d.err != nil {
		return nil, d.err
	}
	return out, nil
}

// DecodeLease decodes a lease description encoded by AppendLease, with
// fingerprint fp. No bytes is a lease that describes nothing. The strings
// are copied out of b, in one allocation. Corrupt input is an error
// wrapping ErrCorrupt, never a panic.
func DecodeLease(b []byte, fp Fingerprint) (Lease, error) {
	l := Lease{Fingerprint: fp}
	if len(b) == 0 {
		return l, nil
	}
	if b[0] != leaseVersion {
		return Lease{}, fmt.Errorf("%w: lease of unknown version %d", ErrCorrupt, b[0])
	}
	// One string holds every field: they are slices of it.
	s := string(b)
	d := decoder{b: unsafe.Slice(unsafe.StringData(s), len(s)), off: 1}
	l.Request.Method = d.string()
	l.Request.Host = d.string()
	l.Request.Path = d.string()
	l.Request.Route = d.string()
	if ms := d.varint(); ms != 0 && d.err == nil {
		l.Request.StartedAt = time.UnixMilli(ms).UTC()
	}
	l.Instance = d.string()
	l.TraceID = d.string()
	if d.err == nil && d.off != len(d.b) {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return Lease{}, fmt.Errorf("lease: %w", d.err)
	}
	return l, nil
}

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
	// Most lengths and counts are below 128, one byte: read it here
	// rather than in binary.Uvarint's loop.
	if d.off < len(d.b) && d.b[d.off] < 0x80 {
		x := d.b[d.off]
		d.off++
		return uint64(x)
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

// request reads the request section; its strings alias d.b, as the
// headers do.
func (d *decoder) request() Request {
	var r Request
	r.Method = d.string()
	r.Host = d.string()
	r.Path = d.string()
	r.Route = d.string()
	ms := d.varint()
	if d.err == nil {
		r.StartedAt = time.UnixMilli(ms).UTC()
	}
	return r
}

// string reads a length and that many bytes as a string over d.b.
func (d *decoder) string() string {
	at, n := d.span()
	return unsafe.String(unsafe.SliceData(d.b[at:at+n]), n)
}

// span reads a length and skips that many bytes: they are d.b[at:at+n].
// A length under 128 is one byte, read here with its bytes' bounds
// checked once; a longer one as length reads it.
func (d *decoder) span() (at, n int) {
	if off := d.off; d.err == nil && off < len(d.b) {
		if n := int(d.b[off]); n < 0x80 && n < len(d.b)-off {
			d.off = off + 1 + n
			return off + 1, n
		}
	}
	n = d.length() // at most what is left, or 0 on an error
	at = d.off
	d.off += n
	return at, n
}

// sealed reads the sealed section. Its key id and data alias d.b, as the
// headers of a record in clear do.
func (d *decoder) sealed() *Sealed {
	id := d.bytes(d.length())
	size := d.uvarint()
	data := d.bytes(d.length())
	if d.err != nil {
		return nil
	}
	if size > math.MaxInt32 {
		d.fail("sealed body size out of range")
		return nil
	}
	return &Sealed{
		KeyID:     unsafe.String(unsafe.SliceData(id), len(id)),
		BodyBytes: int(size),
		Data:      data[:len(data):len(data)],
	}
}

// sealedEnd checks that a sealed record has no header of its own and ends
// there, and returns it.
func (d *decoder) sealedEnd(rec *Record, s *Sealed) (*Record, error) {
	nnames, nvalues := d.length(), d.length()
	if d.err == nil && (nnames != 0 || nvalues != 0) {
		d.fail("headers present on a sealed record")
	}
	if d.err == nil && d.off != len(d.b) {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return nil, d.err
	}
	out := *rec
	out.Sealed = s
	return &out, nil
}

// trailers reads a trailer section. A record has few trailers (a gRPC
// answer's two or three): names and values are strings over d.b, as the
// request section's are, in a map of their own.
func (d *decoder) trailers() map[string][]string {
	nnames, nvalues := d.length(), d.length()
	if d.err != nil {
		return nil
	}
	out := make(map[string][]string, nnames)
	vals := make([]string, nvalues)
	used := 0
	for range nnames {
		name := d.string()
		count := d.length()
		if d.err != nil {
			return nil
		}
		if count > nvalues-used {
			d.fail("more trailer values than announced")
			return nil
		}
		if _, dup := out[name]; dup {
			d.fail("duplicate trailer name")
			return nil
		}
		list := vals[used : used+count : used+count]
		for i := range list {
			list[i] = d.string()
		}
		used += count
		out[name] = list
	}
	if d.err == nil && used != nvalues {
		d.fail("fewer trailer values than announced")
		return nil
	}
	return out
}

// valuesWithRecord is how many header values share one allocation with
// their record: enough for a typical API response's headers.
const valuesWithRecord = 8

// recordWithValues is a decoded record and the backing array of its header
// values, allocated together.
type recordWithValues struct {
	rec  Record
	vals [valuesWithRecord]string
}

// headers decodes the header section, which runs to the end of the input,
// and returns a heap copy of rec with its Header. Names and values are
// strings over that section of d.b, which the caller never modifies (see
// DecodeRecord), and the value lists share one backing array: the record,
// its values and the map are three allocations for most responses.
func (d *decoder) headers(rec *Record) (*Record, error) {
	nnames := d.length()
	nvalues := d.length()
	if d.err != nil {
		return nil, d.err
	}
	if nnames == 0 {
		if nvalues != 0 {
			return nil, d.fail("values without names")
		}
		out := *rec
		return &out, nil
	}
	var out *Record
	var vals []string
	if nvalues <= valuesWithRecord {
		rv := &recordWithValues{rec: *rec}
		out, vals = &rv.rec, rv.vals[:nvalues]
	} else {
		out, vals = new(Record), make([]string, nvalues)
		*out = *rec
	}
	start := d.off
	rest := d.b[start:]
	s := unsafe.String(unsafe.SliceData(rest), len(rest))
	str := func() string {
		at, n := d.span()
		if d.err != nil {
			return ""
		}
		return s[at-start : at-start+n]
	}
	out.Header = make(map[string][]string, nnames)
	used := 0
	prev, sorted := "", true
	for i := range nnames {
		name := str()
		count := d.length()
		if d.err != nil {
			return nil, d.err
		}
		if count > nvalues-used {
			return nil, d.fail("more values than announced")
		}
		// Names are written sorted (AppendRecord): while each is above
		// the one before, none can repeat an earlier one, so the map is
		// only asked once a record is out of order.
		sorted = sorted && (i == 0 || name > prev)
		if !sorted {
			if _, dup := out.Header[name]; dup {
				return nil, d.fail("duplicate header name")
			}
		}
		prev = name
		list := vals[used : used+count : used+count]
		for i := range list {
			list[i] = str()
		}
		used += count
		if d.err != nil {
			return nil, d.err
		}
		out.Header[name] = list
	}
	if used != nvalues {
		return nil, d.fail("fewer values than announced")
	}
	return out, nil
}
