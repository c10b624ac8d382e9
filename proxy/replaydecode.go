package proxy

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/idempotency-proxy/idempotency-proxy/internal/acceptenc"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// A record is the upstream's answer as it was sent, Content-Encoding
// included: the body is encoded when the request that executed accepted
// gzip (or deflate…) and the upstream honoured it. A replay to a client
// that does not accept that coding is decoded on the way out, as nginx's
// gunzip module does, since RFC 9110 (section 12.5.3) has a server send
// no coding the request did not accept (docs/request-handling.md,
// "Replays and content codings"). Only what the standard library reads is
// decoded: gzip (x-gzip) and deflate, one coding alone. br, zstd and
// stacked codings are replayed as recorded.

// errUndecodable is a recorded body that does not decode in the coding
// its Content-Encoding names: it is replayed as recorded.
var errUndecodable = errors.New("the recorded body does not decode in its Content-Encoding")

// replayDecoding returns the content coding a replay of rec, whose
// Content-Encoding field lines are ce, to r decodes its body from, "" when
// the body goes out as recorded: r accepts its coding, the proxy cannot
// decode it, or no body is sent. writeKept asks only for a record with a
// Content-Encoding, so that the common case stays in one place.
func replayDecoding(r *http.Request, rec *store.Record, ce []string) string {
	if len(ce) != 1 || !sendsBody(r, rec) || rec.Status == http.StatusPartialContent {
		// Stacked codings; no body; or a range of the encoded bytes,
		// which no decoder reads on its own.
		return ""
	}
	c := strings.TrimSpace(ce[0])
	if !decodable(c) || acceptenc.Accepts(r.Header["Accept-Encoding"], c) {
		return ""
	}
	return c
}

// decodable reports whether the proxy decodes the content coding c.
func decodable(c string) bool {
	return strings.EqualFold(c, "gzip") || strings.EqualFold(c, "x-gzip") || strings.EqualFold(c, "deflate")
}

// sendsBody reports whether a replay of rec to r sends its body.
func sendsBody(r *http.Request, rec *store.Record) bool {
	return len(rec.Body) > 0 && r.Method != http.MethodHead && bodyAllowed(rec.Status) && !rec.BodyOmitted
}

// decoder returns a reader of body decoded from the content coding c.
// "deflate" is the zlib format (RFC 9110, section 8.4.1.2); a raw deflate
// stream, which some servers send under that name, is read too.
func decoder(c string, body []byte) (io.Reader, error) {
	if !strings.EqualFold(c, "deflate") {
		return gzip.NewReader(bytes.NewReader(body))
	}
	zr, err := zlib.NewReader(bytes.NewReader(body))
	if errors.Is(err, zlib.ErrHeader) {
		return flate.NewReader(bytes.NewReader(body)), nil
	}
	return zr, err
}

// decodedSize decodes body from the content coding c, keeping nothing,
// and returns its decoded length, or errUndecodable. Decoding streams
// through a fixed buffer: however large the decoded body (a small record
// can decode to gigabytes), memory stays bounded, and the record itself
// is bounded by max_response_body.
func decodedSize(c string, body []byte) (int64, error) {
	d, err := decoder(c, body)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errUndecodable, err)
	}
	n, err := io.Copy(io.Discard, d)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errUndecodable, err)
	}
	return n, nil
}

// decodedHeader turns dst, a replay's header copied from the record, into
// the header of its body decoded to size bytes: no Content-Encoding, the
// decoded length (none when trailers follow, so that the response is
// chunked), no Accept-Ranges (ranges were of the encoded bytes), and the
// ETag weakened, as nginx's gunzip module does: the decoded bytes are not
// the ones the strong validator named. Vary is kept.
func decodedHeader(dst http.Header, size int64, trailers bool) {
	delete(dst, "Content-Encoding")
	delete(dst, "Accept-Ranges")
	if trailers {
		delete(dst, "Content-Length")
	} else {
		dst["Content-Length"] = []string{strconv.FormatInt(size, 10)}
	}
	if tags := dst["Etag"]; len(tags) > 0 {
		switch tag := tags[0]; {
		case len(tags) != 1:
			delete(dst, "Etag")
		case strings.HasPrefix(tag, "W/"):
		case strings.HasPrefix(tag, `"`):
			dst["Etag"] = []string{"W/" + tag}
		default:
			delete(dst, "Etag") // not an entity-tag: nothing to weaken
		}
	}
}

// writeDecoded writes body, decoded from the content coding c, to w; the
// decoded length was taken first (decodedSize), so it does decode.
func writeDecoded(w io.Writer, c string, body []byte) {
	d, err := decoder(c, body)
	if err != nil {
		return
	}
	io.Copy(w, d)
}

// logUndecodable logs, once a period (a record replayed often would say
// so on every replay), that rec's body was replayed as recorded to a
// client that does not accept its coding, because it did not decode.
func (h *Handler) logUndecodable(keyHash string, rec *store.Record, err error) {
	if ok, n := h.undecodableLog.Allow(h.clock.Now()); ok {
		h.log.Warn("recorded body does not decode in its content coding; replayed as recorded",
			"key_hash", keyHash, "content_encoding", rec.Header["Content-Encoding"], "error", err, "suppressed", n)
	}
}
