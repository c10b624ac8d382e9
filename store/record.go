package store

import (
	"encoding/binary"
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

// Encoded lease description, version 1, everything of a Lease but its
// fingerprint (which each store keeps where it keeps a record's):
//
//	version   1 byte
//	method, host, path, route   uvarint length + bytes each
//	started   varint Unix milliseconds (0 when unknown)
//	instance, trace id          uvarint length + bytes each
//
// A lease that describes nothing encodes to no bytes at all, as leases
// stored before they were described read: stores append the description
// after a lease's fixed fields, so a lease of either version reads.

// leaseVersion is the first byte of an encoded lease description.
const leaseVersion = 1

// EncodedLeaseSize is the exact length of AppendLease's encoding of l.
func EncodedLeaseSize(l *Lease) int {
	if l.describesNothing() {
		return 0
	}
	q := &l.Request
	return 1 + stringLen(q.Method) + stringLen(q.Host) + stringLen(q.Path) + stringLen(q.Route) +
		varintLen(startedMillis(q.StartedAt)) + stringLen(l.Instance) + stringLen(l.TraceID)
}

// AppendLease appends the encoding of l's description (not its
// fingerprint) to dst. With room for EncodedLeaseSize(l) it does not
// allocate.
func AppendLease(dst []byte, l *Lease) []byte {
	if l.describesNothing() {
		return dst
	}
	q := &l.Request
	dst = append(dst, leaseVersion)
	dst = appendString(dst, q.Method)
	dst = appendString(dst, q.Host)
	dst = appendString(dst, q.Path)
	dst = appendString(dst, q.Route)
	dst = binary.AppendVarint(dst, startedMillis(q.StartedAt))
	dst = appendString(dst, l.Instance)
	return appendString(dst, l.TraceID)
}

func (l *Lease) describesNothing() bool {
	return l.Request.IsZero() && l.Instance == "" && l.TraceID == ""
}

func startedMillis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
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
