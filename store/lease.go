package store

import (
	"encoding/binary"
	"fmt"
	"time"
	"unsafe"
)

// Lease describes a lease on a key: the fingerprint of the request that
// holds it, that request as operators see it, and the proxy process
// running it. Begin stores it with the lease; Begin (for a key in flight),
// Inspect and List return it. Like Request, it never holds a query or a
// body.
type Lease struct {
	Fingerprint Fingerprint
	// Request is the request holding the key.
	Request Request
	// Instance names the proxy process that holds the lease
	// (docs/operating.md, "Instance").
	Instance string
	// TraceID is the trace of the request holding the key, in hex, when
	// tracing is on; "" otherwise.
	TraceID string
}

// leaseVersion is the first byte of an encoded lease description.
const leaseVersion = 1

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

func (l *Lease) describesNothing() bool {
	return l.Request.IsZero() && l.Instance == "" && l.TraceID == ""
}

func startedMillis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
