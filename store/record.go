package store

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"
)

// The first byte of every encoded record is its version. A new layout gets
// a new version; decoders reject versions they do not know.
const (
	// recordVersion is the layout of a record without trailers, written
	// byte for byte as before trailers were kept, so that a proxy of the
	// previous release still reads it during a rolling upgrade.
	recordVersion = 1
	// recordVersionTrailers adds the trailer section. It is written only
	// for a record that has trailers (in clear: a sealed record keeps them
	// inside its sealed data).
	recordVersionTrailers = 2
)

const (
	flagBodyOmitted = 1 << iota
	flagCreatedAt
	flagSealed
	flagRequest
	flagLookup
	knownFlags = flagBodyOmitted | flagCreatedAt | flagSealed | flagRequest | flagLookup
)

// Encoded layout, versions 1 and 2 (uvarint = encoding/binary unsigned varint):
//
//	version   1 byte
//	flags     1 byte   bit 0: body omitted, bit 1: created-at present, bit 2: sealed,
//	                   bit 3: request present, bit 4: lookup present
//	status    uvarint
//	fp        32 bytes
//	created   varint   Unix milliseconds, only when flag bit 1 is set
//	request   only when flag bit 3 is set: uvarint length + method, + host,
//	          + path, + route, varint started-at in Unix milliseconds
//	lookup    only when flag bit 4 is set: 16 bytes key, 16 bytes scope
//	sealed    only when flag bit 2 is set: uvarint length + key id,
//	          uvarint body size in clear, uvarint length + sealed data
//	body      uvarint length + raw bytes (always 0 when omitted or sealed)
//	trailers  version 2 only: nnames uvarint, nvalues uvarint, then per name
//	          as the headers below
//	nnames    uvarint  number of header names (0 when sealed)
//	nvalues   uvarint  total number of header values (0 when sealed)
//	per name: uvarint length + name, uvarint count, per value uvarint length + value
//
// Header names are written in sorted order, so one record always has one
// encoding: a completion retried after a lost reply compares its value with
// the stored one to recognise its own earlier success.
//
// The body precedes the headers so that the decoder can turn the header
// section into one string and slice names and values out of it.

// EncodedSize is the exact length of the encoding of rec. Stores use it to
// size buffers and to account for memory.
func EncodedSize(rec *Record) int {
	n := 2 + uvarintLen(uint64(rec.Status)) + len(rec.Fingerprint)
	if !rec.CreatedAt.IsZero() {
		n += varintLen(rec.CreatedAt.UnixMilli())
	}
	if q := rec.Request; !q.IsZero() {
		n += stringLen(q.Method) + stringLen(q.Host) + stringLen(q.Path) + stringLen(q.Route) +
			varintLen(q.StartedAt.UnixMilli())
	}
	if !rec.Lookup.IsZero() {
		n += len(rec.Lookup.Key) + len(rec.Lookup.Scope)
	}
	if s := rec.Sealed; s != nil {
		n += uvarintLen(uint64(len(s.KeyID))) + len(s.KeyID) + uvarintLen(uint64(s.BodyBytes)) +
			uvarintLen(uint64(len(s.Data))) + len(s.Data)
	}
	body := encodedBody(rec)
	n += uvarintLen(uint64(len(body))) + len(body)
	if t := encodedTrailer(rec); len(t) > 0 {
		n += fieldsSize(t)
	}
	return n + fieldsSize(encodedHeader(rec))
}

// fieldsSize is the encoded size of a header or trailer section.
func fieldsSize(h map[string][]string) int {
	n, nvalues := 0, 0
	for name, vals := range h {
		nvalues += len(vals)
		n += uvarintLen(uint64(len(name))) + len(name) + uvarintLen(uint64(len(vals)))
		for _, v := range vals {
			n += uvarintLen(uint64(len(v))) + len(v)
		}
	}
	return n + uvarintLen(uint64(len(h))) + uvarintLen(uint64(nvalues))
}

// AppendRecord appends the encoding of rec to dst. The result depends only
// on rec's contents (header names are sorted). With dst of capacity
// len(dst)+EncodedSize(rec) and at most sortedNamesOnStack header names it
// does not allocate. The body of a record with BodyOmitted is not encoded,
// nor the header and body of a sealed record (they are in Sealed).
func AppendRecord(dst []byte, rec *Record) []byte {
	var flags byte
	if rec.BodyOmitted {
		flags |= flagBodyOmitted
	}
	if !rec.CreatedAt.IsZero() {
		flags |= flagCreatedAt
	}
	if rec.Sealed != nil {
		flags |= flagSealed
	}
	if !rec.Request.IsZero() {
		flags |= flagRequest
	}
	if !rec.Lookup.IsZero() {
		flags |= flagLookup
	}
	version := byte(recordVersion)
	trailer := encodedTrailer(rec)
	if len(trailer) > 0 {
		version = recordVersionTrailers
	}
	dst = append(dst, version, flags)
	dst = binary.AppendUvarint(dst, uint64(rec.Status))
	dst = append(dst, rec.Fingerprint[:]...)
	if !rec.CreatedAt.IsZero() {
		dst = binary.AppendVarint(dst, rec.CreatedAt.UnixMilli())
	}
	if q := rec.Request; !q.IsZero() {
		dst = appendString(dst, q.Method)
		dst = appendString(dst, q.Host)
		dst = appendString(dst, q.Path)
		dst = appendString(dst, q.Route)
		dst = binary.AppendVarint(dst, q.StartedAt.UnixMilli())
	}
	if l := &rec.Lookup; !l.IsZero() {
		dst = append(dst, l.Key[:]...)
		dst = append(dst, l.Scope[:]...)
	}
	if s := rec.Sealed; s != nil {
		dst = appendString(dst, s.KeyID)
		dst = binary.AppendUvarint(dst, uint64(s.BodyBytes))
		dst = binary.AppendUvarint(dst, uint64(len(s.Data)))
		dst = append(dst, s.Data...)
	}
	body := encodedBody(rec)
	dst = binary.AppendUvarint(dst, uint64(len(body)))
	dst = append(dst, body...)
	if len(trailer) > 0 {
		dst = appendFields(dst, trailer)
	}
	return appendFields(dst, encodedHeader(rec))
}

// appendFields appends a header or trailer section, names sorted.
func appendFields(dst []byte, h map[string][]string) []byte {
	nvalues := 0
	for _, vals := range h {
		nvalues += len(vals)
	}
	dst = binary.AppendUvarint(dst, uint64(len(h)))
	dst = binary.AppendUvarint(dst, uint64(nvalues))
	var stack [sortedNamesOnStack]string
	for _, name := range sortedNames(stack[:0], h) {
		vals := h[name]
		dst = appendString(dst, name)
		dst = binary.AppendUvarint(dst, uint64(len(vals)))
		for _, v := range vals {
			dst = appendString(dst, v)
		}
	}
	return dst
}

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

// sortedNamesOnStack covers the header count of nearly every response
// without a heap allocation for the names.
const sortedNamesOnStack = 32

// sortedNames appends the names of h to dst and sorts them.
func sortedNames(dst []string, h map[string][]string) []string {
	for name := range h {
		dst = append(dst, name)
	}
	slices.Sort(dst)
	return dst
}

func encodedBody(rec *Record) []byte {
	if rec.BodyOmitted || rec.Sealed != nil {
		return nil
	}
	return rec.Body
}

// encodedTrailer is the trailer section of rec's encoding: none for a
// sealed record, whose trailers are inside its sealed data.
func encodedTrailer(rec *Record) map[string][]string {
	if rec.Sealed != nil {
		return nil
	}
	return rec.Trailer
}

func encodedHeader(rec *Record) map[string][]string {
	if rec.Sealed != nil {
		return nil
	}
	return rec.Header
}

func stringLen(s string) int { return uvarintLen(uint64(len(s))) + len(s) }

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

func varintLen(x int64) int {
	ux := uint64(x) << 1
	if x < 0 {
		ux = ^ux
	}
	return uvarintLen(ux)
}
