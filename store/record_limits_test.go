package store

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"
)

// Fields at the largest value the encoding accepts read back as written,
// and EncodedSize is the encoding's length where a length's varint grows a
// byte (127 to 128, 16383 to 16384), so a record's size is never
// misjudged.
func TestRecordFieldsAtTheirLimitsRoundTrip(t *testing.T) {
	values := func(n int) map[string][]string {
		h := map[string][]string{}
		for i := range n {
			h[fmt.Sprint("X-", i)] = []string{"v"}
		}
		return h
	}
	recs := map[string]*Record{
		"largest status":                 {Status: math.MaxInt32},
		"largest sealed body size":       {Sealed: &Sealed{KeyID: "k", BodyBytes: math.MaxInt32, Data: []byte{1}}},
		"values held beside the record":  {Status: 200, Header: values(valuesWithRecord)},
		"one value more than held":       {Status: 200, Header: values(valuesWithRecord + 1)},
		"many values":                    {Status: 200, Header: values(3 * valuesWithRecord)},
		"body of 127 bytes":              {Body: bytes.Repeat([]byte{'b'}, 127)},
		"body of 128 bytes":              {Body: bytes.Repeat([]byte{'b'}, 128)},
		"body of 16383 bytes":            {Body: bytes.Repeat([]byte{'b'}, 16383)},
		"body of 16384 bytes":            {Body: bytes.Repeat([]byte{'b'}, 16384)},
		"header value of 128 bytes":      {Header: map[string][]string{"X": {string(bytes.Repeat([]byte{'v'}, 128))}}},
		"status 128":                     {Status: 128},
		"sealed data of 128 bytes":       {Sealed: &Sealed{KeyID: "k", Data: bytes.Repeat([]byte{1}, 128)}},
		"sealed body size of 128 bytes":  {Sealed: &Sealed{KeyID: "k", BodyBytes: 128, Data: []byte{1}}},
		"key id of 128 bytes, sealed":    {Sealed: &Sealed{KeyID: string(bytes.Repeat([]byte{'k'}, 128)), Data: []byte{1}}},
		"request path of 128 bytes":      {Request: Request{Method: "POST", Path: "/" + string(bytes.Repeat([]byte{'p'}, 127))}},
		"128 header values of one field": {Header: map[string][]string{"X": make([]string, 128)}},
	}
	for name, rec := range recs {
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

// One past the largest value, or a sealed record with anything after its
// sealed section (header counts, however empty, or a trailing byte), does
// not read: it is corrupt, not a record.
func TestRecordFieldsPastTheirLimitsAreCorrupt(t *testing.T) {
	sealed := AppendRecord(nil, &Record{Sealed: &Sealed{KeyID: "k", Data: []byte{1}}})
	// Ending in: body length 0, no header names, no values.
	head := sealed[: len(sealed)-3 : len(sealed)-3]
	// Fields of one value each, the last "X-9", 1 value, "v": it claims
	// a value more than the record announced, with one field (a few
	// values) or more than the values read beside the record.
	overCounted := func(fields int) []byte {
		h := map[string][]string{}
		for i := range fields - 1 {
			h[fmt.Sprint("X-", i)] = []string{"v"}
		}
		h["X-9"] = []string{"v"}
		b := AppendRecord(nil, &Record{Header: h})
		return append(append([]byte{}, b[:len(b)-3]...), 2, 1, 'v', 1, 'w')
	}
	tests := map[string][]byte{
		"a field with more values than announced":              overCounted(2),
		"a field with more values than announced, many values": overCounted(valuesWithRecord + 1),
		"status past MaxInt32":                                 AppendRecord(nil, &Record{Status: math.MaxInt32 + 1}),
		"sealed body size past MaxInt32":                       AppendRecord(nil, &Record{Sealed: &Sealed{KeyID: "k", BodyBytes: math.MaxInt32 + 1, Data: []byte{1}}}),
		"sealed with a trailing byte":                          append(append([]byte{}, sealed...), 0),
		"sealed with names counted":                            append(head, 0, 1, 0),
		"sealed with values counted":                           append(head, 0, 0, 1),
	}
	for name, b := range tests {
		t.Run(name, func(t *testing.T) {
			if rec, err := DecodeRecord(b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeRecord = %+v, %v; want ErrCorrupt", rec, err)
			}
		})
	}
}
