package proxy

import (
	"encoding/binary"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"
)

// SetAccessLog turns the access log on or off for requests that start
// from now on (a reload of access_log); SetAccessLogFormat (accessfields.go)
// chooses its fields.
func (h *Handler) SetAccessLog(on bool) { h.accessLog.Store(on) }

// counted is a request's writer while the access log is on: it notes the
// status and the number of body bytes sent to the client, whoever writes
// them (a replay, the reverse proxy, a problem). It is the request itself,
// so it costs no allocation.
type counted request

// counting returns w wrapped to count what reaches the client.
func (q *request) counting(w http.ResponseWriter) http.ResponseWriter {
	q.out = w
	return (*counted)(q)
}

func (c *counted) Header() http.Header { return c.out.Header() }

func (c *counted) Write(p []byte) (int, error) {
	if c.sentCode == 0 {
		c.sentCode = http.StatusOK
	}
	n, err := c.out.Write(p)
	c.sentBytes += int64(n)
	return n, err
}

// WriteHeader notes the final status; interim (1xx) ones pass through.
func (c *counted) WriteHeader(code int) {
	if c.sentCode == 0 && code >= 200 {
		c.sentCode = code
	}
	c.out.WriteHeader(code)
}

// FlushError flushes the client's writer: a capture around this writer
// flushes through it by these methods, not by Unwrap.
func (c *counted) FlushError() error { return http.NewResponseController(c.out).Flush() }

// Unwrap gives http.ResponseController the client's writer, for flushes,
// full duplex and the hijack of a protocol upgrade.
func (c *counted) Unwrap() http.ResponseWriter { return c.out }

// logAccess writes the request's access line: every request, pass-through
// included; the path without its query, never a body, and of the headers
// only User-Agent, X-Request-Id and X-Forwarded-For, when their fields are
// chosen.
func (h *Handler) logAccess(q *request, outcome Outcome, status int, d time.Duration) {
	if !h.log.Enabled(q.in.Context(), slog.LevelInfo) {
		return
	}
	if q.sentCode != 0 {
		status = q.sentCode // what the client got, pass-through included
	}
	bp := linePool.Get().(*[]byte)
	// The line's time is the request's end, as time.Now would give it: d
	// was measured from q.start a moment ago.
	*bp = appendAccessLine((*bp)[:0], h.accessFormat.Load(), q.start.Add(d), q, outcome, status, d)
	_, _ = h.accessOut.Write(*bp) // a line that cannot be written is lost, as with slog
	linePool.Put(bp)
}

// linePool holds the buffers access lines are formatted in; a writer
// does not keep what it is given.
var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// appendAccessLine appends the access line to b: the bytes the process's
// slog JSON handler writes for the same record (TestAccessLineIsTheJSON
// HandlersLine), formatted by hand because the handler's attributes,
// interface values and encoding/json for the duration were most of the
// line's cost. The fields are f's, in their AccessField order: a new field
// is a constant there and one more entry here, in the place its key takes
// in the line.
func appendAccessLine(b []byte, f *accessFormat, now time.Time, q *request, outcome Outcome, status int, d time.Duration) []byte {
	b = append(b, `{"time":"`...)
	b = appendRFC3339Nano(b, now)
	b = append(b, `","level":"INFO","msg":"access"`...)
	if f.fields.has(FieldMethod) {
		b = append(b, `,"method":`...)
		b = appendJSONString(b, q.in.Method)
	}
	if f.fields.has(FieldPath) {
		b = append(b, `,"path":`...)
		b = appendJSONString(b, q.in.URL.Path)
	}
	if f.fields.has(FieldRoute) {
		b = append(b, `,"route":`...)
		b = appendJSONString(b, q.route.label)
	}
	if f.fields.has(FieldStatus) {
		b = append(b, `,"status":`...)
		b = strconv.AppendInt(b, int64(status), 10)
	}
	if f.fields.has(FieldOutcome) {
		b = append(b, `,"outcome":`...)
		b = appendJSONString(b, string(outcome))
	}
	if f.fields.has(FieldDuration) {
		b = append(b, `,"duration_seconds":`...)
		b = appendSeconds(b, d)
	}
	if f.fields.has(FieldBytes) {
		b = append(b, `,"bytes":`...)
		b = strconv.AppendInt(b, q.sentBytes, 10)
	}
	if f.fields.has(FieldKeyHash) {
		b = append(b, `,"key_hash":`...)
		b = appendJSONString(b, q.keyHash)
	}
	if f.fields.has(FieldReconcileProbes) && q.recon != nil {
		b = append(b, `,"reconcile_probes":`...)
		b = strconv.AppendInt(b, q.recon.probes.Load(), 10)
	}
	if up := q.upstreamTook.Load(); f.fields.has(FieldUpstream) && up != 0 {
		b = append(b, `,"upstream_seconds":`...)
		b = appendSeconds(b, time.Duration(up))
	}
	if f.fields.has(FieldClientAddr) {
		b = append(b, `,"client_addr":`...)
		b = appendJSONString(b, clientAddr(q.in, f.trusted))
	}
	if f.fields.has(FieldUserAgent) {
		b = append(b, `,"user_agent":`...)
		b = appendJSONString(b, userAgent(q.in))
	}
	if id := requestID(q.in); f.fields.has(FieldRequestID) && id != "" {
		b = append(b, `,"request_id":`...)
		b = appendJSONString(b, id)
	}
	if f.fields.has(FieldProtocol) {
		b = append(b, `,"protocol":"`...)
		b = append(b, protocolOf(q.in).String()...)
		b = append(b, '"')
	}
	return append(b, "}\n"...)
}

// stamp is the second an access line was last written in, formatted:
// the date, the clock and the zone change once a second, and formatting
// them was half of the line's cost.
type stamp struct {
	unix  int64
	loc   *time.Location
	clock string // "2006-01-02T15:04:05"
	zone  string // "Z" or "-07:00"
}

var lastStamp atomic.Pointer[stamp]

// appendRFC3339Nano appends t as t.AppendFormat(b, time.RFC3339Nano) does,
// which is slog's JSON time.
func appendRFC3339Nano(b []byte, t time.Time) []byte {
	s := lastStamp.Load()
	if s == nil || s.unix != t.Unix() || s.loc != t.Location() {
		f := t.Truncate(time.Second).Format(time.RFC3339)
		const clockLen = len("2006-01-02T15:04:05")
		s = &stamp{unix: t.Unix(), loc: t.Location(), clock: f[:clockLen], zone: f[clockLen:]}
		lastStamp.Store(s)
	}
	b = append(b, s.clock...)
	if ns := t.Nanosecond(); ns != 0 {
		var digits [10]byte
		digits[0] = '.'
		putNine((*[9]byte)(digits[1:]), uint32(ns))
		n := 10
		for digits[n-1] == '0' {
			n-- // RFC3339Nano drops trailing zeros
		}
		b = append(b, digits[:n]...)
	}
	return append(b, s.zone...)
}

// appendSeconds writes d.Seconds() as encoding/json writes it. Under a
// second and from a microsecond, that is the nanoseconds' decimal digits
// after "0." without trailing zeros (the float is the division of two
// exact integers, correctly rounded, and its shortest form is then that
// decimal); other durations take the float's own formatting.
func appendSeconds(b []byte, d time.Duration) []byte {
	if d < time.Microsecond || d >= time.Second {
		return appendJSONFloat(b, d.Seconds())
	}
	var digits [11]byte
	digits[0], digits[1] = '0', '.'
	putNine((*[9]byte)(digits[2:]), uint32(d))
	n := len(digits)
	for digits[n-1] == '0' {
		n--
	}
	return append(b, digits[:n]...)
}

// putNine writes v, below a billion, as nine decimal digits with leading
// zeros, two at a time.
func putNine(b *[9]byte, v uint32) {
	for i := 7; i > 0; i -= 2 {
		p := 2 * (v % 100)
		b[i], b[i+1] = decimalPairs[p], decimalPairs[p+1]
		v /= 100
	}
	b[0] = byte('0' + v)
}

// decimalPairs are the two digits of 0 to 99, in order.
const decimalPairs = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"

// appendJSONFloat writes f as encoding/json does, which slog's JSON
// handler calls for every float: 'f' notation from 1e-6 to 1e21, else 'e'
// with the exponent's leading zero dropped ("1e-7", not "1e-07").
func appendJSONFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// jsonPlain is true of the bytes appendJSONString copies as they are:
// printable ASCII but the quote and the backslash. One table lookup a byte
// instead of four comparisons: the access line's strings are mostly such
// bytes.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// plain8 reports whether the first eight bytes of s (it has eight) are all
// jsonPlain, read as one word: none has its high bit set, none is below
// 0x20, and none is a quote or a backslash. Each test is exact for a word
// with no byte of the kind (a borrow starts only at one).
func plain8(s string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	x := binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s), 8))
	quote, backslash := x^('"'*ones), x^('\\'*ones)
	below := (x - 0x20*ones) &^ x
	return (x|below|(quote-ones)&^quote|(backslash-ones)&^backslash)&highs == 0
}

// appendJSONString writes s quoted as slog's JSON handler does: control
// characters, quotes and backslashes escaped, invalid UTF-8 as U+FFFD,
// and U+2028 and U+2029 escaped; <, > and & as they are.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if len(s)-i >= 8 && plain8(s[i:]) {
			i += 8
			continue
		}
		if jsonPlain[s[i]] {
			i++
			continue
		}
		if c := s[i]; c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
