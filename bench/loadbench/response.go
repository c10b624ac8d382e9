//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// response is what the load generator needs of an HTTP/1.1 response.
type response struct {
	status   int
	replayed bool // Idempotent-Replayed: true
	close    bool // Connection: close
	length   int  // of the body, from Content-Length
}

// maxHead bounds a response's status line and headers.
const maxHead = 64 << 10

var (
	crlf     = []byte("\r\n")
	headEnd  = []byte("\r\n\r\n")
	errFrame = errors.New("response framing not supported: want a Content-Length")
)

// parseResponse parses the response at the start of b. It returns its size
// in bytes, or 0 when b does not hold all of it yet. Every target answers
// with a Content-Length; anything else is an error rather than a guess.
func parseResponse(b []byte) (response, int, error) {
	r, head, err := parseHead(b)
	if err != nil || head == 0 || len(b) < head+r.length {
		return response{}, 0, err
	}
	return r, head + r.length, nil
}

// parseHead parses the status line and header of the response at the start
// of b. It returns the length of the head, or 0 when b does not hold all of
// it yet; the body's length is in the response.
func parseHead(b []byte) (response, int, error) {
	var r response
	end := bytes.Index(b, headEnd)
	if end < 0 {
		if len(b) > maxHead {
			return r, 0, fmt.Errorf("response head longer than %d bytes", maxHead)
		}
		return r, 0, nil
	}
	line, rest, _ := bytes.Cut(b[:end], crlf)
	// "HTTP/1.1 200 OK"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return r, 0, fmt.Errorf("malformed status line %q", line[:min(len(line), 80)])
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil || status < 100 {
		return r, 0, fmt.Errorf("malformed status line %q", line[:min(len(line), 80)])
	}
	r.status = status
	length := -1
	for len(rest) > 0 {
		var h []byte
		h, rest, _ = bytes.Cut(rest, crlf)
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return r, 0, fmt.Errorf("malformed header line %q", h[:min(len(h), 80)])
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return r, 0, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return r, 0, errFrame
		case bytes.EqualFold(name, []byte("Idempotent-Replayed")):
			r.replayed = string(value) == "true"
		case bytes.EqualFold(name, []byte("Connection")):
			r.close = bytes.EqualFold(value, []byte("close"))
		}
	}
	switch {
	case status < 200:
		return r, 0, fmt.Errorf("interim response %d not expected", status)
	case status == 204 || status == 304:
		length = 0
	case length < 0:
		return r, 0, errFrame
	}
	r.length = length
	return r, end + len(headEnd), nil
}

// errReplay means a response's Idempotent-Replayed header was not what the
// scenario implies, so the path measured is not the one named.
var errReplay = errors.New("unexpected replay state")

// check fails a non-2xx response, and one whose replay marker is not what
// want says.
func check(r response, key string, want expect) error {
	if r.status < 200 || r.status > 299 {
		return fmt.Errorf("key %q: status %d, want 2xx", key, r.status)
	}
	switch {
	case want == replayed && !r.replayed:
		return fmt.Errorf("key %q: %w: not replayed, want a replay", key, errReplay)
	case want == fresh && r.replayed:
		return fmt.Errorf("key %q: %w: replayed, want an execution", key, errReplay)
	}
	return nil
}
