package grpcwire

import (
	"encoding/binary"
	"errors"
	"io"
	"mime"
	"strings"
	"time"
)

// ContentType is the media type of gRPC requests and responses.
const ContentType = "application/grpc"

// IsGRPC reports whether a Content-Type is gRPC's: application/grpc,
// possibly with a message format (application/grpc+proto) or parameters.
// gRPC-Web (application/grpc-web) is another protocol, a plain HTTP
// request to the proxy.
func IsGRPC(contentType string) bool {
	if !strings.HasPrefix(contentType, ContentType) {
		return false
	}
	rest := contentType[len(ContentType):]
	if rest == "" || rest[0] == '+' {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == ContentType
}

// prefixLen is the length of a message's prefix: a compressed flag and a
// 4-byte big-endian length.
const prefixLen = 5

// Errors of ReadFirst.
var (
	// ErrTooLarge is a first message longer than the limit.
	ErrTooLarge = errors.New("grpc message larger than the limit")
	// ErrMalformed is a body that ends inside a message, or before any.
	ErrMalformed = errors.New("grpc request body does not hold a whole message")
)

// First is a gRPC request body's first message, and what follows it.
type First struct {
	// Message is the first message with its prefix, as sent.
	Message []byte
	// Unary is true when the body ended right after it: a unary (or
	// server-streaming) call's request. A client- or bidirectional-
	// streaming call keeps its request stream open after its first
	// message, and Body then holds the rest of it.
	Unary bool
	// Body is the request body from its start, Message included, to be
	// forwarded as it is when the call is a stream.
	Body io.ReadCloser
}

// ReadFirst reads the first message of a gRPC request body, of at most
// limit bytes with its prefix, and then waits up to endWait for the body's
// end. With an error, First.Body is still the whole body, what was read of
// it included.
//
// How a unary call is told from a streaming one on the wire: a unary or
// server-streaming call's request is one message and the end of the
// stream, which gRPC clients send together (grpc-go sets END_STREAM on the
// DATA frame carrying the message's last bytes; others send an empty DATA
// frame with it straight after, never waiting for the server). A client- or
// bidirectional-streaming call keeps its stream open after the first
// message: it sends more, or waits for the server's messages before it
// does. So a body that ends within endWait of its first message is a
// unary call's request; one that goes on, or has not ended by then, is a
// stream. A stream whose client happened to send one message and end
// within endWait looks exactly like a unary request on the wire; the
// proxy then protects it as one — its one message executed once, its
// answer replayed.
//
// The read that waits for the end is not abandoned when endWait passes:
// Body returns whatever it brings, after Message, so nothing of a stream is
// lost or reordered.
func ReadFirst(body io.ReadCloser, limit int64, endWait time.Duration) (First, error) {
	prefix := make([]byte, prefixLen)
	if n, err := io.ReadFull(body, prefix); err != nil {
		return read(prefix[:n], body), readErr(err)
	}
	n := int64(binary.BigEndian.Uint32(prefix[1:]))
	if prefixLen+n > limit {
		return read(prefix, body), ErrTooLarge
	}
	msg := make([]byte, prefixLen+n)
	copy(msg, prefix)
	if got, err := io.ReadFull(body, msg[prefixLen:]); err != nil {
		return read(msg[:prefixLen+got], body), readErr(err)
	}
	p := &pending{done: make(chan struct{}), body: body}
	go p.read()
	t := time.NewTimer(endWait)
	defer t.Stop()
	select {
	case <-p.done:
		switch {
		case p.n == 0 && p.err == io.EOF:
			return First{Message: msg, Unary: true, Body: &joined{head: msg, rest: body}}, nil
		case p.n == 0:
			return First{}, p.err // the client reset the stream
		}
	case <-t.C:
	}
	return First{Message: msg, Body: &joined{head: msg, rest: body, p: p}}, nil
}

// read is what ReadFirst returns with an error: a Body that is the whole
// body still, what was read of it included, for a caller that forwards it
// as it came (a route in shadow mode).
func read(head []byte, body io.ReadCloser) First {
	return First{Body: &joined{head: head, rest: body}}
}

func readErr(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return ErrMalformed
	}
	return err
}

// pending is the read that looks for the body's end after the first
// message: at least one byte, or an error.
type pending struct {
	done chan struct{}
	body io.Reader
	buf  [512]byte
	n    int
	err  error
}

func (p *pending) read() {
	defer close(p.done)
	for p.n == 0 && p.err == nil {
		p.n, p.err = p.body.Read(p.buf[:])
	}
}

// joined is a body read again from its start: the first message, then
// what the pending read brought, then the rest of the original body.
type joined struct {
	head []byte
	rest io.ReadCloser
	p    *pending
	off  int // into p.buf
}

func (j *joined) Read(b []byte) (int, error) {
	if len(j.head) > 0 {
		n := copy(b, j.head)
		j.head = j.head[n:]
		return n, nil
	}
	if p := j.p; p != nil {
		<-p.done
		if j.off < p.n {
			n := copy(b, p.buf[j.off:p.n])
			j.off += n
			return n, nil
		}
		if p.err != nil {
			return 0, p.err
		}
		j.p = nil
	}
	return j.rest.Read(b)
}

func (j *joined) Close() error { return j.rest.Close() }

// Counter counts the length-prefixed messages of a body written to it
// piece by piece, keeping none of it: an answer too large to record still
// shows whether it held more than one message. Its zero value is ready.
type Counter struct {
	n      int
	left   uint64 // bytes of the current message still to come
	prefix [prefixLen]byte
	got    int // bytes of the next prefix seen so far
}

// Write counts the messages that begin in p.
func (c *Counter) Write(p []byte) {
	for len(p) > 0 {
		if c.left > 0 {
			k := min(uint64(len(p)), c.left)
			p, c.left = p[k:], c.left-k
			continue
		}
		k := copy(c.prefix[c.got:], p)
		p, c.got = p[k:], c.got+k
		if c.got == prefixLen {
			c.n, c.got = c.n+1, 0
			c.left = uint64(binary.BigEndian.Uint32(c.prefix[1:]))
		}
	}
}

// Messages is how many messages have begun.
func (c *Counter) Messages() int { return c.n }
