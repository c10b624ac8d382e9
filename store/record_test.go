package store

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"
)

func sampleRecords() map[string]*Record {
	fp := Fingerprint{1, 2, 3, 31: 0xff}
	return map[string]*Record{
		"empty":  {},
		"status": {Status: 201, Fingerprint: fp},
		"binary body and repeated headers": {
			Status: 200,
			Header: map[string][]string{
				"Content-Type": {"application/octet-stream"},
				"Set-Cookie":   {"a=1", "b=2", ""},
				"X-Empty":      {},
			},
			Body:        []byte{0, 0xff, 0, '\r', '\n', 0xfe},
			Fingerprint: fp,
			CreatedAt:   time.UnixMilli(1_700_000_000_123).UTC(),
		},
		"body omitted": {
			Status: 200, BodyOmitted: true, Fingerprint: fp,
			Header:    map[string][]string{"Content-Length": {"99999999"}},
			CreatedAt: time.UnixMilli(-5).UTC(),
		},
		"large status": {Status: 1 << 30},
		"sealed": {
			Status: 201, Fingerprint: fp, CreatedAt: time.UnixMilli(1_700_000_000_123).UTC(),
			Sealed: &Sealed{KeyID: "2026-01", BodyBytes: 1234, Data: []byte{0, 1, 0xff, 'x'}},
		},
		"sealed with body omitted": {
			Status: 200, BodyOmitted: true,
			Sealed: &Sealed{KeyID: "k", Data: []byte{9}},
		},
		"request": {
			Status: 201, Fingerprint: fp, Body: []byte("ok"),
			Header:  map[string][]string{"Content-Type": {"text/plain"}},
			Request: sampleRequest,
		},
		"request, sealed": {
			Status: 201, Request: sampleRequest,
			Sealed: &Sealed{KeyID: "k", BodyBytes: 2, Data: []byte{9}},
		},
		"request without start": {Status: 200, Request: Request{Method: "POST"}},
		"trailers": {
			Status: 200, Fingerprint: fp, Body: []byte{0, 0, 0, 0, 1, 0x08},
			Header:  map[string][]string{"Content-Type": {"application/grpc"}},
			Trailer: map[string][]string{"Grpc-Status": {"0"}, "Grpc-Message": {""}, "X-Sums": {"a", "b"}},
		},
		"trailers, body omitted": {
			Status: 200, BodyOmitted: true, Request: sampleRequest,
			Trailer: map[string][]string{"Grpc-Status": {"14"}},
		},
		"lookup": {Status: 201, Fingerprint: fp, Request: sampleRequest, Lookup: sampleLookup},
		"lookup, sealed": {
			Status: 201, Request: sampleRequest, Lookup: sampleLookup,
			Sealed: &Sealed{KeyID: "k", BodyBytes: 2, Data: []byte{9}},
		},
	}
}

var sampleLookup = Lookup{Key: LookupKey("8e03978e-40d5-43e8-bc93-6894a57f9324"), Scope: [16]byte{7, 15: 0xee}}

// A record's lookup costs 32 bytes, and a record without one encodes and
// decodes as records did before lookups were kept.
func TestRecordLookupCosts32Bytes(t *testing.T) {
	with := &Record{Status: 201, Request: sampleRequest, Lookup: sampleLookup}
	without := &Record{Status: 201, Request: sampleRequest}
	if added := EncodedSize(with) - EncodedSize(without); added != 32 {
		t.Errorf("the lookup adds %d bytes, want 32", added)
	}
	if got, err := DecodeRecord(AppendRecord(nil, without)); err != nil || !got.Lookup.IsZero() {
		t.Errorf("a record without a lookup decodes as %+v, %v; want no lookup", got, err)
	}
	if LookupKey("a") == LookupKey("b") || LookupKey("a") != LookupKey("a") {
		t.Error("LookupKey does not tell keys apart, or is not a function of the key")
	}
}

var sampleRequest = Request{
	Method: "POST", Host: "billing.example", Path: "/v1/charges", Route: "POST /v1/charges",
	StartedAt: time.UnixMilli(1_700_000_000_001).UTC(),
}

// A record stored before records kept their request decodes as it did,
// with no request; one that keeps it costs the request's strings and a
// few bytes more.
func TestRecordsWithoutRequestStillDecode(t *testing.T) {
	// AppendRecord of {Status: 201, Fingerprint: {1}, CreatedAt:
	// 1700000000123ms, Body: "ok"} before the request section existed.
	old := []byte{1, 2, 0xc9, 0x01, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0xf6, 0xa1, 0xab, 0xfe, 0xf9, 0x62, 2, 'o', 'k', 0, 0}
	rec, err := DecodeRecord(old)
	if err != nil {
		t.Fatal(err)
	}
	want := &Record{Status: 201, Fingerprint: Fingerprint{1}, CreatedAt: time.UnixMilli(1_700_000_000_123).UTC(), Body: []byte("ok")}
	if !recordsEqual(rec, want) || !rec.Request.IsZero() {
		t.Fatalf("old record decodes as %+v, want %+v", rec, want)
	}
	if got := AppendRecord(nil, want); !bytes.Equal(got, old) {
		t.Errorf("a record without a request encodes as\n%v\nwant the old encoding\n%v", got, old)
	}
	with := *want
	with.Request = sampleRequest
	added := EncodedSize(&with) - EncodedSize(want)
	t.Logf("the request adds %d bytes to a record (%s %s%s, route %q)", added, sampleRequest.Method, sampleRequest.Host, sampleRequest.Path, sampleRequest.Route)
	if strings := len("POST") + len("billing.example") + len("/v1/charges") + len("POST /v1/charges"); added != strings+4+6 {
		t.Errorf("the request adds %d bytes, want its %d bytes of strings, 4 lengths and 6 of time", added, strings)
	}
}

// A record without trailers is written as version 1, as before trailers
// were kept, so the previous release reads what this one writes; one with
// trailers is version 2, which the previous release refuses as a format it
// does not know (record-unreadable), never misreads.
func TestTrailersAreVersion2AndEverythingElseVersion1(t *testing.T) {
	for name, rec := range sampleRecords() {
		want := byte(recordVersion)
		if len(rec.Trailer) > 0 && rec.Sealed == nil {
			want = recordVersionTrailers
		}
		if got := AppendRecord(nil, rec)[0]; got != want {
			t.Errorf("%s: version %d, want %d", name, got, want)
		}
	}
	// A trailer on a sealed record is inside its sealed data: the store's
	// copy has none in clear.
	sealed := &Record{Trailer: map[string][]string{"Grpc-Status": {"0"}}, Sealed: &Sealed{KeyID: "k", Data: []byte{1}}}
	got, err := DecodeRecord(AppendRecord(nil, sealed))
	if err != nil || got.Trailer != nil {
		t.Fatalf("sealed record with a trailer decodes as %+v, %v; want no trailer in clear", got, err)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	for name, rec := range sampleRecords() {
		t.Run(name, func(t *testing.T) {
			b := AppendRecord(nil, rec)
			if got, want := len(b), EncodedSize(rec); got != want {
				t.Fatalf("len(encoding) = %d, EncodedSize = %d", got, want)
			}
			got, err := DecodeRecord(b)
			if err != nil {
				t.Fatalf("DecodeRecord: %v", err)
			}
			if !recordsEqual(got, rec) {
				t.Fatalf("round trip:\n got  %+v\n want %+v", got, rec)
			}
		})
	}
}

func TestAppendRecordOmitsBody(t *testing.T) {
	rec := &Record{Status: 200, Body: []byte("dropped"), BodyOmitted: true}
	got, err := DecodeRecord(AppendRecord(nil, rec))
	if err != nil {
		t.Fatalf("DecodeRecord: %v", err)
	}
	if len(got.Body) != 0 || !got.BodyOmitted {
		t.Fatalf("got body %q omitted %v, want empty body omitted", got.Body, got.BodyOmitted)
	}
}

func TestDecodeRecordRejectsCorruption(t *testing.T) {
	valid := AppendRecord(nil, sampleRecords()["binary body and repeated headers"])
	tests := map[string][]byte{
		"empty input":     {},
		"unknown version": append([]byte{3}, valid[1:]...),
		// Version 2 announces a trailer section, which must name one.
		"version 2 without trailers": append([]byte{2}, AppendRecord(nil, &Record{Status: 200})[1:]...),
		"unknown flag":               append([]byte{1, 0x80}, valid[2:]...),
		"trailing bytes":             append(append([]byte{}, valid...), 0),
	}
	// A sealed record carrying a body or headers in clear besides.
	// Ending in: body length 0, no header names, no values.
	sealed := AppendRecord(nil, &Record{Sealed: &Sealed{KeyID: "k", Data: []byte{1}}})
	head := sealed[: len(sealed)-3 : len(sealed)-3]
	tests["sealed with body"] = append(head, 1, 'x', 0, 0)
	tests["sealed with headers"] = append(head, 0, 1, 1, 1, 'X', 1, 0)
	// A record claiming its body was omitted while carrying one.
	withBody := AppendRecord(nil, &Record{Body: []byte("x")})
	withBody[1] |= flagBodyOmitted
	tests["omitted with body"] = withBody
	for i := range valid {
		tests[fmt.Sprintf("truncated at %d", i)] = valid[:i]
	}
	// Version 2 records with a trailer section of their own making: up to
	// the body, the section, then no headers.
	v2 := func(rec *Record, section ...byte) []byte {
		enc := AppendRecord(nil, rec)
		out := append([]byte{recordVersionTrailers}, enc[1:len(enc)-2]...)
		return append(append(out, section...), 0, 0)
	}
	tests["trailer section empty"] = v2(&Record{Status: 200}, 0, 0)
	tests["more trailer values than announced"] = v2(&Record{Status: 200}, 2, 2, 1, 'A', 2, 1, 'a', 1, 'b', 1, 'B', 1, 1, 'c')
	tests["fewer trailer values than announced"] = v2(&Record{Status: 200}, 1, 2, 1, 'A', 1, 1, 'a')
	tests["duplicate trailer name"] = v2(&Record{Status: 200}, 2, 2, 1, 'A', 1, 1, 'a', 1, 'A', 1, 1, 'b')
	tests["sealed with trailers in clear"] = v2(&Record{Sealed: &Sealed{KeyID: "k", Data: []byte{1}}}, 1, 1, 1, 'A', 1, 1, 'a')
	if rec, err := DecodeRecord(v2(&Record{Status: 200}, 1, 1, 1, 'A', 1, 1, 'a')); err != nil || rec.Trailer["A"][0] != "a" {
		t.Fatalf("the sections the cases above spoil, whole: %+v, %v", rec, err)
	}
	// Header sections of their own making, after a record with no body.
	headers := func(section ...byte) []byte {
		enc := AppendRecord(nil, &Record{Status: 200})
		return append(enc[:len(enc)-2:len(enc)-2], section...)
	}
	tests["duplicate header name"] = headers(2, 2, 1, 'A', 1, 1, 'a', 1, 'A', 1, 1, 'b')
	tests["duplicate header name, out of order"] = headers(3, 3, 1, 'B', 1, 1, 'b', 1, 'A', 1, 1, 'a', 1, 'B', 1, 1, 'c')
	// Names out of order are read as they are: only a repeated one is corrupt.
	if rec, err := DecodeRecord(headers(2, 2, 1, 'B', 1, 1, 'b', 1, 'A', 1, 1, 'a')); err != nil || rec.Header["A"][0] != "a" || rec.Header["B"][0] != "b" {
		t.Fatalf("a header section out of order, names distinct: %+v, %v", rec, err)
	}
	withTrailers := AppendRecord(nil, sampleRecords()["trailers"])
	for i := range withTrailers {
		tests[fmt.Sprintf("trailers truncated at %d", i)] = withTrailers[:i]
	}
	for name, b := range tests {
		t.Run(name, func(t *testing.T) {
			if rec, err := DecodeRecord(b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeRecord = %+v, %v; want ErrCorrupt", rec, err)
			}
		})
	}
}

func TestAppendRecordAllocs(t *testing.T) {
	rec := sampleRecords()["binary body and repeated headers"]
	buf := make([]byte, 0, EncodedSize(rec))
	allocs := testing.AllocsPerRun(100, func() { buf = AppendRecord(buf[:0], rec) })
	if allocs != 0 {
		t.Fatalf("AppendRecord into a sized buffer: %v allocs, want 0", allocs)
	}
}

func FuzzRecordRoundTrip(f *testing.F) {
	f.Add(200, "Content-Type", "text/plain", "X", []byte("body"), false, int64(1700000000000))
	f.Add(0, "", "", "", []byte{0, 0xff}, true, int64(-1))
	f.Fuzz(func(t *testing.T, status int, name, v1, v2 string, body []byte, omitted bool, ms int64) {
		if status < 0 || status > 1<<31-1 {
			t.Skip()
		}
		rec := &Record{
			Status:      status,
			Header:      map[string][]string{name: {v1, v2}, name + "-2": {v2}},
			Body:        body,
			BodyOmitted: omitted,
			Fingerprint: Fingerprint{byte(ms), 7},
			CreatedAt:   time.UnixMilli(ms).UTC(),
		}
		if omitted {
			rec.Body = nil
		}
		b := AppendRecord(nil, rec)
		got, err := DecodeRecord(b)
		if err != nil {
			t.Fatalf("DecodeRecord(AppendRecord(%+v)): %v", rec, err)
		}
		if !recordsEqual(got, rec) {
			t.Fatalf("round trip:\n got  %+v\n want %+v", got, rec)
		}
	})
}

func FuzzDecode(f *testing.F) {
	for _, rec := range sampleRecords() {
		f.Add(AppendRecord(nil, rec))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := DecodeRecord(b)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode to something that decodes equal.
		again, err := DecodeRecord(AppendRecord(nil, rec))
		if err != nil || !recordsEqual(again, rec) {
			t.Fatalf("re-encode of %+v: %+v, %v", rec, again, err)
		}
	})
}

// recordsEqual compares records treating nil and empty slices and maps alike.
func recordsEqual(a, b *Record) bool {
	if a.Status != b.Status || a.BodyOmitted != b.BodyOmitted || a.Fingerprint != b.Fingerprint ||
		!a.CreatedAt.Equal(b.CreatedAt) || !bytes.Equal(a.Body, b.Body) || len(a.Header) != len(b.Header) {
		return false
	}
	if (a.Sealed == nil) != (b.Sealed == nil) || a.Lookup != b.Lookup || a.Request.Method != b.Request.Method || a.Request.Host != b.Request.Host ||
		a.Request.Path != b.Request.Path || a.Request.Route != b.Request.Route || !a.Request.StartedAt.Equal(b.Request.StartedAt) {
		return false
	}
	if a.Sealed != nil && (a.Sealed.KeyID != b.Sealed.KeyID || a.Sealed.BodyBytes != b.Sealed.BodyBytes ||
		!bytes.Equal(a.Sealed.Data, b.Sealed.Data)) {
		return false
	}
	return fieldsEqual(a.Header, b.Header) && fieldsEqual(a.Trailer, b.Trailer)
}

func fieldsEqual(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, av := range a {
		bv, ok := b[k]
		if !ok || len(av) != len(bv) {
			return false
		}
		for i := range av {
			if av[i] != bv[i] {
				return false
			}
		}
	}
	return true
}

// TestEncodingIsDeterministic guards the retried-completion check of the
// stores: one record must always encode to the same bytes, whatever order
// Go's map iteration visits its header names in.
func TestEncodingIsDeterministic(t *testing.T) {
	rec := &Record{Status: 200, Header: map[string][]string{}}
	for i := range 40 {
		rec.Header[fmt.Sprintf("X-H%02d", i)] = []string{fmt.Sprint(i), "v"}
	}
	want := AppendRecord(nil, rec)
	for i := range 100 {
		if got := AppendRecord(nil, rec); !bytes.Equal(got, want) {
			t.Fatalf("encoding #%d differs from the first", i+2)
		}
	}
}
