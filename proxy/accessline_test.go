package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
)

// slogAccessLine is the access line as the process's slog JSON handler
// writes the same record: what operators' parsers and the docs describe.
func slogAccessLine(t testing.TB, f *accessFormat, now time.Time, q *request, outcome Outcome, status int, d time.Duration) []byte {
	var buf bytes.Buffer
	rec := slog.NewRecord(now, slog.LevelInfo, "access", 0)
	add := func(field AccessField, a slog.Attr) {
		if f.fields.has(field) {
			rec.AddAttrs(a)
		}
	}
	add(FieldMethod, slog.String("method", q.in.Method))
	add(FieldPath, slog.String("path", q.in.URL.Path))
	add(FieldRoute, slog.String("route", q.route.label))
	add(FieldStatus, slog.Int("status", status))
	add(FieldOutcome, slog.String("outcome", string(outcome)))
	add(FieldDuration, slog.Float64("duration_seconds", d.Seconds()))
	add(FieldBytes, slog.Int64("bytes", q.sentBytes))
	add(FieldKeyHash, slog.String("key_hash", q.keyHash))
	if up := q.upstreamTook.Load(); up != 0 {
		add(FieldUpstream, slog.Float64("upstream_seconds", time.Duration(up).Seconds()))
	}
	add(FieldClientAddr, slog.String("client_addr", clientAddr(q.in, f.trusted)))
	add(FieldUserAgent, slog.String("user_agent", userAgent(q.in)))
	if id := requestID(q.in); id != "" {
		add(FieldRequestID, slog.String("request_id", id))
	}
	add(FieldProtocol, slog.String("protocol", protocolOf(q.in).String()))
	if err := slog.NewJSONHandler(&buf, nil).Handle(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func accessRequest(method, path, label, keyHash string, sent int64) *request {
	return &request{
		in:        &http.Request{Method: method, URL: &url.URL{Path: path}, RemoteAddr: "192.0.2.7:50123", Header: http.Header{}},
		identity:  identity{route: &route{terms: terms{label: label}}, keyHash: keyHash},
		sentBytes: sent,
	}
}

// formats are field sets the line is compared in: the default, every
// field, none, each field alone.
func formats(t testing.TB) []*accessFormat {
	all := make([]AccessField, len(accessFieldWords))
	for i := range all {
		all[i] = AccessField(i)
	}
	sets := [][]AccessField{nil, all, {}}
	for _, f := range all {
		sets = append(sets, []AccessField{f})
	}
	var out []*accessFormat
	for _, fields := range sets {
		f, err := newAccessFormat(fields, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// The access line is written by hand, not by slog: byte for byte it is the
// line slog's JSON handler writes for the same record, whatever the path
// holds (quotes, control characters, invalid UTF-8, JSONP's separators)
// and however long the request took.
func TestAccessLineIsTheJSONHandlersLine(t *testing.T) {
	now := time.Date(2026, 12, 3, 13, 4, 5, 678901234, time.FixedZone("X", 3600))
	paths := []string{"/v1/charges", "", `/a"b\c`, "/tab\tnl\ncr\r", "/ctl\x00\x01\x1f\x7f", "/<script>&amp;",
		"/bad\xff\xfeutf8", "/sep\u2028\u2029", "/é/日本/🙂", "/%2F"}
	durations := []time.Duration{0, 1, 999, time.Microsecond, 1001, 1234567, 100 * time.Millisecond, time.Second - 1, time.Second,
		3 * time.Second, 1500 * time.Millisecond, 90 * time.Minute, math.MaxInt64, -time.Millisecond}
	for _, f := range formats(t) {
		for _, p := range paths {
			for i, d := range durations {
				q := accessRequest("POST", p, "POST /v1/"+p, "3f2a1b9c0d4e5f60718293a4b5c6d7e8", 199)
				// The headers' values are the paths': a client writes them.
				q.in.Header.Set("User-Agent", p)
				q.in.Header.Set("X-Request-Id", p+strings.Repeat("日", i*4))
				q.in.Header.Set("X-Forwarded-For", "203.0.113.9, 10.1.2.3")
				q.in.RemoteAddr = "10.0.0.1:1234"
				q.upstreamTook.Store(int64(durations[len(durations)-1-i]))
				got := appendAccessLine(nil, f, now, q, OutcomeReplayed, 201, d)
				if want := slogAccessLine(t, f, now, q, OutcomeReplayed, 201, d); !bytes.Equal(got, want) {
					t.Errorf("fields %b, path %q, duration %d:\n got %s\nwant %s", f.fields, p, d, got, want)
				}
			}
		}
	}
	def := formats(t)[0]
	for _, at := range []time.Time{now.Truncate(time.Second), now.Add(-678 * time.Millisecond).UTC(),
		now.Truncate(time.Second).Add(500 * time.Millisecond), now.Truncate(time.Second).Add(1), now.Add(time.Hour), now.In(time.Local), now} {
		q := accessRequest("GET", "/", defaultRoute, "", 0)
		if got, want := appendAccessLine(nil, def, at, q, OutcomePassthrough, 200, time.Millisecond), slogAccessLine(t, def, at, q, OutcomePassthrough, 200, time.Millisecond); !bytes.Equal(got, want) {
			t.Errorf("time %v:\n got %s\nwant %s", at, got, want)
		}
	}
}

func FuzzAccessLineIsTheJSONHandlersLine(f *testing.F) {
	f.Add("POST", "/v1/charges", "default", "3f2a", int64(199), int64(1234567), 201, int64(0), uint32(0), "curl/8", "req-1", "10.0.0.1:80", "1.2.3.4, 10.0.0.2", int64(0))
	f.Add("GE\"T", "/\xff\u2028", "r\\", "", int64(-1), int64(1), 0, int64(5e8), uint32(1<<13-1), "\x00\xfe", "\u2029\"", "[::1]:9", "::1,,x", int64(7))
	base := time.Date(2026, 12, 3, 13, 4, 5, 678901234, time.FixedZone("X", -5400))
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	f.Fuzz(func(t *testing.T, method, path, route, keyHash string, sent, d int64, status int, at int64,
		fields uint32, ua, id, remote, xff string, upstream int64) {
		now := base.Add(time.Duration(at % (1 << 50)))
		q := accessRequest(method, path, route, keyHash, sent)
		q.in.RemoteAddr = remote
		q.in.Header["User-Agent"] = []string{ua}
		q.in.Header["X-Request-Id"] = []string{id}
		q.in.Header["X-Forwarded-For"] = []string{xff}
		q.upstreamTook.Store(upstream)
		format := &accessFormat{fields: accessSet(fields), trusted: trusted}
		got := appendAccessLine(nil, format, now, q, Outcome(route), status, time.Duration(d))
		if want := slogAccessLine(t, format, now, q, Outcome(route), status, time.Duration(d)); !bytes.Equal(got, want) {
			t.Errorf("\n got %s\nwant %s", got, want)
		}
	})
}

// Under a second the duration is written from its nanoseconds, not as a
// float: the digits are encoding/json's for every duration tried, a
// million spread over the range and its edges.
func TestAccessLineSecondsAreTheFloatsDigits(t *testing.T) {
	check := func(d time.Duration) {
		if got, want := appendSeconds(nil, d), appendJSONFloat(nil, d.Seconds()); !bytes.Equal(got, want) {
			t.Fatalf("duration %d ns: %s, want %s", d, got, want)
		}
	}
	for d := time.Duration(0); d < 3*time.Microsecond; d++ {
		check(d)
	}
	for d := time.Second - 3*time.Microsecond; d < time.Second+3*time.Microsecond; d++ {
		check(d)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		check(time.Duration(rng.Int64N(int64(time.Second))))
	}
}

// The access line costs no allocation: a replay allocates as much with the
// access log on as with it off.
func TestAccessLineAddsNoAllocation(t *testing.T) {
	if raceEnabled() {
		t.Skip("the race detector drops sync.Pool items and adds allocations")
	}
	const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	allocs := func(opts ...envOption) float64 {
		rig := newBenchRig(t, opts...)
		rig.r.Header["User-Agent"] = []string{"curl/8.5.0"}
		rig.r.Header["X-Request-Id"] = []string{"f81d4fae-7dec-11d0-a765-00a0c91e6bf6"}
		rig.r.Header["X-Forwarded-For"] = []string{"203.0.113.9, 10.0.0.2", "2001:db8::1"}
		rig.serve(key)
		return testing.AllocsPerRun(200, func() { rig.serve(key) })
	}
	everyField := func(o *Options) {
		o.AccessLogFields = make([]AccessField, len(accessFieldWords))
		for i := range o.AccessLogFields {
			o.AccessLogFields[i] = AccessField(i)
		}
		o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8"),
			netip.MustParsePrefix("2001:db8::/32")}
	}
	off := allocs()
	for name, on := range map[string]float64{"default fields": allocs(accessLogged), "every field": allocs(accessLogged, everyField)} {
		if on != off {
			t.Errorf("a replay allocates %.0f times with the access log on (%s), %.0f with it off: the line allocates", on, name, off)
		}
	}
}

// appendJSONFloat switches between plain and exponent notation exactly
// where encoding/json does, which slog's JSON handler calls: 1e-6 is still
// plain, 1e21 already an exponent.
func TestJSONFloatChangesNotationWhereEncodingJSONDoes(t *testing.T) {
	for _, f := range []float64{0, 1e-6, -1e-6, math.Nextafter(1e-6, 0), 1e-7, 1e21, -1e21, math.Nextafter(1e21, 0), 1.5e300, 5e-324} {
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONFloat(nil, f); !bytes.Equal(got, want) {
			t.Errorf("%g: %s, want %s", f, got, want)
		}
	}
}

// Every single byte is written as slog's JSON handler writes it: the
// printable ASCII ones as they are, the others escaped or, past ASCII and
// alone, as U+FFFD; alone, and at every place of an eight-byte run of
// printable ones, which is read a word at a time.
func TestAccessLineStringIsTheJSONHandlersForEveryByte(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey) {
			return slog.Attr{}
		}
		return a
	}}))
	for c := range 256 {
		strs := []string{string([]byte{byte(c)})}
		// Lower case and upper case: a word-at-a-time test must find the
		// byte among letters above 0x60 and among those below it alike.
		for _, text := range []string{"run of 8, then more", "RUN OF 8, THEN MORE"} {
			for at := range 8 {
				run := []byte(text)
				run[at] = byte(c)
				strs = append(strs, string(run))
			}
		}
		for _, s := range strs {
			buf.Reset()
			log.Info("", "s", s)
			want := strings.TrimSuffix(strings.TrimPrefix(buf.String(), `{"s":`), "}\n")
			if got := appendJSONString(nil, s); string(got) != want {
				t.Errorf("byte %#x in %q: %s, want %s", c, s, got, want)
			}
		}
	}
}
