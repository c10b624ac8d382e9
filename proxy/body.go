package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
)

// setBody gives an outgoing request its body from memory, with a known
// length, so the transport writes headers and a small body in one write and
// can rewind it when a connection fails before anything was written.
func setBody(r *http.Request, body []byte) {
	r.ContentLength = int64(len(body))
	if len(body) == 0 {
		r.Body, r.GetBody = http.NoBody, nil
		return
	}
	r.Body = newBodyReader(body)
	r.GetBody = func() (io.ReadCloser, error) { return newBodyReader(body), nil }
}

// bodyReader is a request body read from memory.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

func newBodyReader(body []byte) *bodyReader {
	b := &bodyReader{}
	b.Reset(body)
	return b
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
		return nil, tooLarge(limit)
	}
	return body, nil
}

func tooLarge(limit int64) error {
	return &bodyTooLargeError{limit}
}

type bodyTooLargeError struct{ limit int64 }

func (e *bodyTooLargeError) Error() string {
	return "The request body is larger than this route's limit of " + formatBytes(e.limit) + "."
}
func (e *bodyTooLargeError) Is(target error) bool { return target == errBodyTooLarge }

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + " GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
