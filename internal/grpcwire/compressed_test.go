package grpcwire

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"strings"
	"testing"
)

// message is payload as a message with its prefix: compressed with gzip
// when gz is set.
func message(t *testing.T, payload string, gz bool) []byte {
	t.Helper()
	b := []byte(payload)
	if gz {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		b = buf.Bytes()
	}
	msg := make([]byte, prefixLen, prefixLen+len(b))
	if gz {
		msg[0] = 1
	}
	binary.BigEndian.PutUint32(msg[1:], uint32(len(b)))
	return append(msg, b...)
}

func TestDecompressedIsTheMessageAsSentUncompressed(t *testing.T) {
	payload := strings.Repeat("order-1 ", 32)
	plain := message(t, payload, false)
	if got := Decompressed(message(t, payload, true), "gzip", 1<<20); !bytes.Equal(got, plain) {
		t.Fatalf("Decompressed = %q, want the uncompressed message %q", got, plain)
	}
	// Exactly the limit, with its prefix, is within it.
	if got := Decompressed(message(t, payload, true), "gzip", int64(len(plain))); !bytes.Equal(got, plain) {
		t.Fatalf("at the limit: %q, want the uncompressed message", got)
	}
	corrupt := message(t, payload, true)
	corrupt[len(corrupt)-3] ^= 0xff // its checksum
	for name, tt := range map[string]struct {
		msg      []byte
		encoding string
		limit    int64
	}{
		"uncompressed":                  {plain, "gzip", 1 << 20},
		"compressed with another codec": {message(t, payload, true), "snappy", 1 << 20},
		"flagged without a codec":       {message(t, payload, true), "", 1 << 20},
		"corrupt":                       {corrupt, "gzip", 1 << 20},
		"not gzip":                      {append([]byte{1, 0, 0, 0, 3}, "abc"...), "gzip", 1 << 20},
		"over the limit decompressed":   {message(t, payload, true), "gzip", int64(len(plain)) - 1},
		"a prefix only":                 {[]byte{1, 0, 0}, "gzip", 1 << 20},
	} {
		if got := Decompressed(tt.msg, tt.encoding, tt.limit); got != nil {
			t.Errorf("%s: Decompressed = %q, want nil: known by its bytes as sent", name, got)
		}
	}
}
