package grpcwire

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"math"
)

// EncodingField names the codec of a call's compressed messages.
const EncodingField = "Grpc-Encoding"

// gzipEncoding is the one grpc-encoding Decompressed reads: the codec
// grpc-go ships (google.golang.org/grpc/encoding/gzip), and the one every
// gRPC implementation offers.
const gzipEncoding = "gzip"

// Decompressed is message msg, with its prefix as ReadFirst returns it, as
// the same message sent uncompressed reads on the wire: prefix flag 0, its
// decompressed length, its decompressed bytes. It is for a message
// compressed with gzip (encoding is the call's grpc-encoding), whose bytes
// depend on the sender's compression level and library, not only on the
// message. It is nil when msg is not compressed, or is compressed with
// another codec, or does not decompress whole within limit bytes with its
// prefix: such a message is known by its bytes as sent.
func Decompressed(msg []byte, encoding string, limit int64) []byte {
	if len(msg) < prefixLen || msg[0] != 1 || encoding != gzipEncoding || limit <= prefixLen {
		return nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(msg[prefixLen:]))
	if err != nil {
		return nil
	}
	buf := bytes.NewBuffer(make([]byte, prefixLen, prefixLen+2*len(msg)))
	n, err := io.Copy(buf, io.LimitReader(zr, limit-prefixLen+1))
	if err != nil || prefixLen+n > limit || n > math.MaxUint32 {
		return nil
	}
	out := buf.Bytes()
	out[0] = 0
	binary.BigEndian.PutUint32(out[1:prefixLen], uint32(n))
	return out
}
