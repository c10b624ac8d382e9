package proxy

import (
	"bytes"
	"crypto/sha256"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// accountsEnv is a proxy whose routes protect only DELETE
// /v1/accounts/{id}, requiring a key, in front of an upstream that hashes
// every body it gets; limit is every route's max_request_body.
func accountsEnv(t *testing.T, limit int64) (e *env, got *[]string) {
	t.Helper()
	var bodies []string // guarded by the upstream's one-at-a-time tests
	del := DefaultPolicy()
	del.Methods, del.RequireKey, del.MaxRequestBody = []string{http.MethodDelete}, true, limit
	e = newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		sum := sha256.Sum256(b)
		bodies = append(bodies, string(sum[:]))
		w.WriteHeader(http.StatusOK)
	}, withPolicy(func(p *Policy) { p.Methods, p.MaxRequestBody = []string{http.MethodDelete}, limit }),
		func(o *Options) { o.Routes = []Route{{Pattern: "DELETE /v1/accounts/{id}", Policy: del}} })
	return e, &bodies
}

// send posts body of contentType ("" for none) to the proxy with key ("" for none).
func (e *env) send(t *testing.T, target, key, contentType string, body []byte, header ...string) *response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+target, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", target, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &response{Response: res, body: string(b)}
}

// multipartForm returns a multipart/form-data body of fields, in order
// (name, value pairs), and its Content-Type.
func multipartForm(t testing.TB, fields ...string) ([]byte, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		if err := mw.WriteField(fields[i], fields[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), mw.FormDataContentType()
}

// A POST whose _method parameter names DELETE reaches the upstream's
// DELETE handler in Rails (the form body), Laravel and Symfony (the body,
// then the query string, PHP reading ".method" and "[method" as _method;
// Laravel also a JSON body's top-level "_method" member)
// and Spring (the query string or the body): it
// gets the DELETE route's policy — its key required, executed once and
// replayed — wherever the parameter is.
func TestMethodParamIsTheMethodAnUpstreamApplies(t *testing.T) {
	multi, multiType := multipartForm(t, "_method", "delete", "reason", "closed")
	deep := strings.Repeat("[", 100) + strings.Repeat("]", 100) // PHP reads 512 levels
	for _, c := range []struct {
		name, target, contentType string
		body                      []byte
	}{
		{"url-encoded body", "/v1/accounts/1", "application/x-www-form-urlencoded", []byte("reason=closed&_method=delete")},
		{"url-encoded body, parameters after the content type", "/v1/accounts/1", "Application/X-WWW-Form-Urlencoded; charset=utf-8", []byte("_method=DELETE")},
		{"body with no content type", "/v1/accounts/1", "", []byte("_method=DELETE")},
		{"multipart body", "/v1/accounts/1", multiType, multi},
		{"query string", "/v1/accounts/1?_method=DELETE", "application/json", []byte(`{"reason":"closed"}`)},
		{"query string, escaped name", "/v1/accounts/1?%5Fmethod=DELETE", "application/json", []byte(`{}`)},
		{"body, a name PHP reads as _method", "/v1/accounts/1", "application/x-www-form-urlencoded", []byte("+.method=DELETE")},
		{"query string, a name PHP reads as _method", "/v1/accounts/1?%5Bmethod=DELETE", "application/json", []byte(`{}`)},
		{"JSON body", "/v1/accounts/1", "application/json", []byte(`{"reason":"closed","_method":"DELETE"}`)},
		{"JSON body, a +json type", "/v1/accounts/1", "application/vnd.api+json", []byte(`{"_method":"delete"}`)},
		{"JSON body, an escaped name", "/v1/accounts/1", "Application/JSON; charset=utf-8", []byte(`{"\u005fmetho\u0064":"DELETE"}`)},
		{"JSON body, after a value nested deep", "/v1/accounts/1", "application/json", []byte(`{"a":` + deep + `,"_method":"DELETE"}`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, _ := accountsEnv(t, 10<<20)
			if r := e.send(t, c.target, "", c.contentType, c.body); r.StatusCode != http.StatusBadRequest || r.problemType() != "missing-key" {
				t.Fatalf("without a key: %d %s, want 400 missing-key", r.StatusCode, r.body)
			}
			first := e.send(t, c.target, "acct-1", c.contentType, c.body)
			again := e.send(t, c.target, "acct-1", c.contentType, c.body)
			if first.StatusCode != http.StatusOK || !again.replayed() {
				t.Fatalf("first %d, retry %d replayed=%v; want one execution and its replay", first.StatusCode, again.StatusCode, again.replayed())
			}
			if n := e.up.calls.Load(); n != 1 {
				t.Fatalf("the upstream executed the DELETE %d times, want 1", n)
			}
		})
	}
}

// A form or JSON body a route's reading must not refuse or hold: an upload
// larger than max_request_body to a path no route protects is forwarded
// whole, as sent, though its first bytes were read for a _method; a POST
// whose _method names a protected method still gets that route's limit.
func TestBodiesPastTheLimitPassWhereNothingIsProtected(t *testing.T) {
	e, bodies := accountsEnv(t, 1024)
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10/16) // 64 KiB
	upload, uploadType := multipartForm(t, "title", "report", "file", string(big))
	for _, c := range []struct{ name, contentType string }{
		{"multipart", uploadType},
		{"url-encoded", "application/x-www-form-urlencoded"},
		{"JSON", "application/json"},
	} {
		body := upload
		switch c.contentType {
		case "application/x-www-form-urlencoded":
			body = append([]byte("title=report&file="), big...)
		case "application/json":
			body = []byte(`{"title":"report","_method":"PUT","file":"` + string(big) + `"}`)
		}
		t.Run(c.name, func(t *testing.T) {
			r := e.send(t, "/v1/uploads", "", c.contentType, body)
			if r.StatusCode != http.StatusOK {
				t.Fatalf("an upload past max_request_body: %d %s, want it forwarded", r.StatusCode, r.body)
			}
			sum := sha256.Sum256(body)
			if got := (*bodies)[len(*bodies)-1]; got != string(sum[:]) {
				t.Fatalf("the upstream got another body than the one sent")
			}
		})
	}
	pad := strings.Repeat("x", 2048)
	for _, c := range []struct{ contentType, body string }{
		{"application/x-www-form-urlencoded", "_method=DELETE&pad=" + pad},
		{"application/json", `{"_method":"DELETE","pad":"` + pad + `"}`},
	} {
		if r := e.send(t, "/v1/accounts/1", "acct-1", c.contentType, []byte(c.body)); r.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("a DELETE by a %s _method past its route's limit: %d %s, want 413", c.contentType, r.StatusCode, r.body)
		}
	}
}

// _method parameters that name two methods — in the query string and the
// body, repeated, or beside a method-override header — or something that
// is not a method beside one that is are read differently by each framework (Symfony takes
// the body's, Spring the query string's, Rack ignores the query string and
// takes its parameter before the header): on a table where any of the
// readings is protected, the request is refused with 400 ambiguous-method
// and never forwarded.
func TestMethodParamsThatDisagreeAreRefused(t *testing.T) {
	e, _ := accountsEnv(t, 10<<20)
	multi, multiType := multipartForm(t, "_method", "PATCH", "_method", "DELETE")
	const form = "application/x-www-form-urlencoded"
	for _, c := range []struct {
		name, target, contentType string
		body                      string
		header                    []string
	}{
		{"query and body", "/v1/accounts/1?_method=PATCH", form, "_method=DELETE", nil},
		{"repeated in the body", "/v1/accounts/1", form, "_method=PATCH&_method=DELETE", nil},
		{"repeated in the query", "/v1/accounts/1?_method=DELETE&_method=PUT", "application/json", "{}", nil},
		{"repeated in a multipart body", "/v1/accounts/1", multiType, string(multi), nil},
		{"beside an override header", "/v1/accounts/1", form, "_method=DELETE", []string{"X-HTTP-Method-Override", "PATCH"}},
		{"a method beside what is none", "/v1/accounts/1?_method=DELETE%2CPATCH", form, "_method=DELETE", nil},
		{"JSON member beside an override header", "/v1/accounts/1", "application/json", `{"_method":"DELETE"}`, []string{"X-HTTP-Method-Override", "PATCH"}},
		{"repeated in a JSON body", "/v1/accounts/1", "application/json", `{"_method":"PATCH","_method":"DELETE"}`, nil},
		{"query and JSON body", "/v1/accounts/1?_method=PATCH", "application/json", `{"_method":"DELETE"}`, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.send(t, c.target, "acct-1", c.contentType, []byte(c.body), c.header...)
			if r.StatusCode != http.StatusBadRequest || r.problemType() != "ambiguous-method" {
				t.Errorf("%d %s, want 400 ambiguous-method", r.StatusCode, r.body)
			}
		})
	}
	if n := e.up.calls.Load(); n != 0 {
		t.Fatalf("the upstream executed %d ambiguous requests", n)
	}
	// Parameters that agree, with each other and a header, are one method.
	r := e.send(t, "/v1/accounts/1?_method=delete", "acct-2", form, []byte("_method=DELETE"), "X-HTTP-Method-Override", "DELETE")
	if r.StatusCode != http.StatusOK {
		t.Fatalf("_method and a header naming DELETE: %d %s, want it executed", r.StatusCode, r.body)
	}
}

// A key sent again with another _method is another operation to the
// upstream: a 422, never the first one's answer.
func TestAKeyReusedWithAnotherMethodParamIsAMismatch(t *testing.T) {
	e, _ := accountsEnv(t, 10<<20)
	const form = "application/x-www-form-urlencoded"
	if r := e.send(t, "/v1/accounts/1?_method=DELETE", "acct-1", form, []byte("reason=closed")); r.StatusCode != http.StatusOK {
		t.Fatalf("first: %d %s", r.StatusCode, r.body)
	}
	r := e.send(t, "/v1/accounts/1", "acct-1", form, []byte("reason=closed&_method=DELETE"))
	if r.StatusCode != http.StatusUnprocessableEntity || r.problemType() != "payload-mismatch" {
		t.Fatalf("the key with _method in the body: %d %s, want 422 payload-mismatch", r.StatusCode, r.body)
	}
	const json = "application/json"
	if r := e.send(t, "/v1/accounts/2", "acct-2", json, []byte(`{"reason":"closed","_method":"DELETE"}`)); r.StatusCode != http.StatusOK {
		t.Fatalf("first, _method in a JSON body: %d %s", r.StatusCode, r.body)
	}
	r = e.send(t, "/v1/accounts/2?_method=DELETE", "acct-2", json, []byte(`{"reason":"closed"}`))
	if r.StatusCode != http.StatusUnprocessableEntity || r.problemType() != "payload-mismatch" {
		t.Fatalf("the key with _method in the query: %d %s, want 422 payload-mismatch", r.StatusCode, r.body)
	}
	if n := e.up.calls.Load(); n != 2 {
		t.Fatalf("the upstream executed %d requests, want 2", n)
	}
}

// A JSON body names a method to Laravel only by a top-level "_method"
// member whose value is a string, under a Content-Type holding "/json" or
// "+json": a member nested, of another case or of another type, or a body
// of another type, leaves the POST what it was sent as — forwarded
// without a key, unprotected here.
func TestJSONBodiesThatNameNoMethodPassAsTheirOwn(t *testing.T) {
	e, _ := accountsEnv(t, 10<<20)
	for _, c := range []struct{ name, contentType, body string }{
		{"nested", "application/json", `{"account":{"_method":"DELETE"}}`},
		{"another case", "application/json", `{"_METHOD":"DELETE","field":"_method"}`},
		{"not a string", "application/json", `{"_method":["DELETE"]}`},
		{"in a string", "application/json", `{"note":"\"_method\":\"DELETE\""}`},
		{"not a JSON type", "text/plain", `{"_method":"DELETE"}`},
		{"a gRPC stream", "application/grpc+json", `{"_method":"DELETE"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if r := e.send(t, "/v1/accounts/1", "", c.contentType, []byte(c.body)); r.StatusCode != http.StatusOK {
				t.Fatalf("%d %s, want it forwarded as a POST", r.StatusCode, r.body)
			}
		})
	}
}

// Whatever a form or query string holds, reading its _method parameters
// never panics and leaves the body as sent: the request's body reads
// every byte of it, in order, however much of it was read for them, and
// nothing more when it ends before its Content-Length.
func FuzzReadMethodParamsKeepsTheBody(f *testing.F) {
	multi, multiType := multipartForm(f, "_method", "DELETE", "file", "0123456789")
	f.Add("application/x-www-form-urlencoded", "_method=PATCH", []byte("_method=DELETE&a=1"), int64(8), true, uint8(0))
	f.Add(multiType, "", multi, int64(40), false, uint8(0))
	f.Add("", "%5Bmethod=put", []byte("+.method=delete"), int64(1<<10), true, uint8(3))
	f.Add("application/json", "", []byte(`{"_method":"DELETE","a":[1]}`), int64(20), true, uint8(0))
	f.Fuzz(func(t *testing.T, contentType, query string, body []byte, limit int64, known bool, short uint8) {
		if limit < 0 || limit > 1<<16 {
			return
		}
		r, err := http.NewRequest(http.MethodPost, "http://proxy.invalid/v1/accounts/1", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.URL.RawQuery = query
		if contentType != "" {
			r.Header.Set("Content-Type", contentType)
		}
		if r.ContentLength += int64(short); !known {
			r.ContentLength = -1
		}
		tg := readTarget(r)
		read, whole := readMethodParams(r, &tg, limit, nil)
		if whole && (!bytes.Equal(read, body) || short > 0 && known) {
			t.Fatalf("read whole %q, the body is %q", read, body)
		}
		got, err := io.ReadAll(r.Body)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("the body forwarded is %q (%v), sent %q", got, err, body)
		}
	})
}

// The key API reads a request as the request path does: a POST whose
// _method names a protected method is that method's route's key.
func TestKeyHashFromReadsTheMethodParam(t *testing.T) {
	e, _ := accountsEnv(t, 10<<20)
	for _, c := range []struct{ contentType, body string }{
		{"application/x-www-form-urlencoded", "_method=DELETE"},
		{"application/json", `{"_method":"DELETE"}`},
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/accounts/1", strings.NewReader(c.body))
		r.Header.Set("Content-Type", c.contentType)
		if _, err := e.handler.KeyHashFrom(r, "acct-1", ""); err != nil {
			t.Fatalf("KeyHashFrom a POST with %s %s: %v, want the DELETE route's key", c.contentType, c.body, err)
		}
	}
}
