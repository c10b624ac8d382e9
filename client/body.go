package client

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
)

// maxDrain bounds how much of a retried response's body is read so that its
// connection can be reused; a longer body is closed instead, which costs a
// connection but no unbounded read.
const maxDrain = 64 << 10

// bodySource hands every attempt a fresh copy of the request body.
type bodySource struct {
	get    func() (io.ReadCloser, error)
	length int64 // ContentLength of every copy
}

// replayableBody returns how to replay req's body, or nil for a request
// without one. A body without GetBody is buffered once, up to limit bytes.
func replayableBody(req *http.Request, limit int64) (*bodySource, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	if req.GetBody != nil {
		return &bodySource{get: req.GetBody, length: req.ContentLength}, nil
	}
	defer req.Body.Close()
	buf, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("client: reading request body: %w", err)
	}
	if int64(len(buf)) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes and no GetBody", ErrBodyTooLarge, limit)
	}
	return &bodySource{
		get:    func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil },
		length: int64(len(buf)),
	}, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// drainAndClose lets the transport reuse the connection of a response the
// caller will never see.
func drainAndClose(resp *http.Response) {
	_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
	_ = resp.Body.Close()
}

// cancelOnClose releases an attempt's timeout context once the caller is done
// with the body: cancelling earlier would cut the body short.
type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
