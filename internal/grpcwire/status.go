package grpcwire

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Field names of a call's status, as net/http's header maps hold them.
const (
	StatusField   = "Grpc-Status"
	MessageField  = "Grpc-Message"
	DetailsField  = "Grpc-Status-Details-Bin"
	PushbackField = "Grpc-Retry-Pushback-Ms"
	TimeoutField  = "Grpc-Timeout"
)

// Status is the status of an answered call: from its trailers, or from
// its header when the answer is trailers-only. ok is false when neither
// carries grpc-status.
func Status(header, trailer http.Header) (code Code, ok bool) {
	v := trailer[StatusField]
	if len(v) == 0 {
		v = header[StatusField]
	}
	if len(v) != 1 {
		return 0, false
	}
	return ParseStatus(v[0])
}

// WriteStatus answers a call with a status and no message, as a
// trailers-only response: HTTP 200, Content-Type application/grpc and the
// status in the one header section, which the server sends with the end of
// the stream. message is percent-encoded as grpc-message is; pushbackMs,
// when positive, is sent as grpc-retry-pushback-ms, the delay a client's
// retry policy waits before trying again (gRFC A6).
func WriteStatus(w http.ResponseWriter, code Code, message string, pushbackMs int) {
	h := w.Header()
	h["Content-Type"] = []string{ContentType}
	h[StatusField] = []string{code.Value()}
	if message != "" {
		h[MessageField] = []string{EncodeMessage(message)}
	}
	if pushbackMs > 0 {
		h[PushbackField] = []string{strconv.Itoa(pushbackMs)}
	}
	w.WriteHeader(http.StatusOK)
}

// EncodeMessage percent-encodes a grpc-message value: every byte outside
// printable ASCII, and '%', as %XX.
func EncodeMessage(s string) string {
	clean := true
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	const hex = "0123456789ABCDEF"
	for i := range len(s) {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// Timeout reads a grpc-timeout value: an integer of at most 8 digits and a
// unit (H, M, S, m, u, n). ok is false for anything else.
func Timeout(v string) (d time.Duration, ok bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	if n > math.MaxInt64/int64(unit) {
		// Longer than a Duration holds: the longest, as grpc-go reads it,
		// never a product wrapped around to a short or negative wait.
		return math.MaxInt64, true
	}
	return time.Duration(n) * unit, true
}
