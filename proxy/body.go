package proxy

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"

	"github.com/idempotency-proxy/idempotency-proxy/internal/bytesize"
)

// setBody gives an outgoing request its body from memory, with a known
// length, so that the transport writes the headers and a small body in one
// write (see forwardMemoryBody) instead of flushing the headers first: a
// syscall on each side, and a wake-up of the upstream, saved on every
// forwarded request.
//
// GetBody, which lets the transport send the request again on a new
// connection, is set only for methods the transport resends solely when
// nothing of them was written. GET, HEAD, OPTIONS and TRACE it also resends
// after writing them, when a reused connection fails (net/http's
// Request.isReplayable), if their body can be rewound or is empty
// (http.NoBody) — and a keyed request must reach the upstream at most once.
// So those methods get no GetBody, and an empty body as an in-memory reader
// of unknown length: not rewindable. The transport still sends that as no
// body at all for a GET, HEAD or OPTIONS that came without one (it probes
// the reader, finds it empty, and sends neither Content-Length nor
// Transfer-Encoding); one that came chunked keeps its chunked framing, and
// a TRACE, which it does not probe, goes out with an empty chunked body.
// The reverse proxy would drop a body of length 0, making any of them
// resendable.
//
// A request that came with trailers is sent chunked, with a body even when
// empty: the transport sends trailers only after a chunked body, and an
// empty body given as http.NoBody (or dropped by the reverse proxy for its
// length of 0) would lose them — they are part of what the client asked
// for, and of its fingerprint. A request received over HTTP/1.1 is chunked
// already; one received over HTTP/2 has no framing of its own to keep.
//
// The body is read through rd when it is not nil: a request that is
// executed keeps a reader of its own for it, one allocation less per
// forwarded request. rd must outlive every reader of r.
func setBody(r *http.Request, body []byte, rd *memoryBody) {
	if rd == nil {
		rd = new(memoryBody)
	}
	rd.Reset(body)
	r.ContentLength, r.GetBody, r.Body = int64(len(body)), nil, rd
	if len(r.Trailer) > 0 {
		r.ContentLength, r.TransferEncoding = -1, []string{"chunked"}
	}
	switch {
	case len(body) == 0 && replayableMethod(r.Method):
		r.ContentLength = -1
	case len(body) == 0 && r.ContentLength == 0:
		// Kept as rd, not http.NoBody: the reverse proxy drops a body of
		// length 0 anyway, and unrewindable knows the request by it.
	case replayableMethod(r.Method):
	default:
		r.GetBody = func() (io.ReadCloser, error) { return newBodyReader(body), nil }
	}
}

// replayableMethod reports the methods net/http's transport resends after
// writing them when their body can be rewound.
func replayableMethod(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// memoryBody is a request body held in memory.
type memoryBody struct{ bytes.Reader }

func (*memoryBody) Close() error { return nil }

func newBodyReader(body []byte) io.ReadCloser {
	b := &memoryBody{}
	b.Reset(body)
	return b
}

// forwardMemoryBody, called from the reverse proxy's Rewrite, gives the
// transport an in-memory body as a type it recognises as such (net/http's
// isKnownInMemoryReader: a *bytes.Reader in an io.NopCloser); for any
// other body it flushes the headers on their own before sending the body.
// httputil.ReverseProxy wraps every outgoing body in a reader of its own,
// which hides the type of the body set by setBody; the outgoing request is
// the proxy's, so it may take the body back.
func forwardMemoryBody(pr *httputil.ProxyRequest) {
	if b, ok := pr.In.Body.(*memoryBody); ok && pr.Out.Body != nil {
		pr.Out.Body = io.NopCloser(&b.Reader)
	}
}

// inflated is body decoded as its single Content-Encoding says, gzip or
// deflate, for the key sources that read JSON: Express's body-parser
// decodes such a body before it reads the JSON in it, so the key that
// upstream sees is in the decoded bytes, and a redelivery read as sent
// would find none and run again. It is nil without such an encoding, or
// when the body does not decode within limit bytes (body-parser refuses
// it then). Upstreams that do not decode refuse the body as not JSON.
func inflated(r *http.Request, body []byte, limit int64) []byte {
	ce := r.Header["Content-Encoding"]
	if len(ce) != 1 || len(body) == 0 {
		return nil
	}
	var rd io.Reader
	switch enc := strings.TrimSpace(ce[0]); {
	case strings.EqualFold(enc, "gzip"), strings.EqualFold(enc, "x-gzip"):
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil
		}
		rd = zr
	case strings.EqualFold(enc, "deflate"):
		zr, err := zlib.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil
		}
		rd = zr
	default:
		return nil
	}
	out, err := io.ReadAll(io.LimitReader(rd, limit+1))
	if err != nil || int64(len(out)) > limit {
		return nil
	}
	return out
}

var errBodyTooLarge = errors.New("request body too large")

// readBody reads the whole request body, refusing bodies over limit before
// reading them when their length is declared.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	if r.ContentLength >= 0 {
		body := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return nil, err
		}
		return body, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > limit {
		return body, tooLarge(limit) // what was read, for a shadow route to forward
	}
	return body, nil
}

func tooLarge(limit int64) error {
	return &bodyTooLargeError{limit}
}

type bodyTooLargeError struct{ limit int64 }

func (e *bodyTooLargeError) Error() string {
	return "The request body is larger than this route's limit of " + bytesize.Format(e.limit) + "."
}
func (e *bodyTooLargeError) Is(target error) bool { return target == errBodyTooLarge }
