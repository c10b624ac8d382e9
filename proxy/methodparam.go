package proxy

import (
	"bytes"
	"encoding/hex"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/idempotency-proxy/idempotency-proxy/internal/grpcwire"
	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

// methodParam is the parameter through which frameworks let an HTML form,
// which can send only GET or POST, name the method an upstream applies to
// a POST:
//
//   - Rack's MethodOverride, on in every Rails app (rack,
//     lib/rack/method_override.rb), reads it from the form body: a
//     url-encoded or multipart body, or a POST's body sent with no
//     Content-Type (rack, lib/rack/request.rb, form_data?).
//   - Symfony's Request::getMethod, when the parameter override is on, as
//     it is in Laravel (symfony, src/Symfony/Component/HttpFoundation/Request.php),
//     reads it from the form body, then from the query string. Laravel
//     puts a JSON body's top-level members in the form body's place
//     (laravel/framework, src/Illuminate/Http/Request.php,
//     createFromBase), so a JSON "_method" member is read too.
//   - Spring's HiddenHttpMethodFilter (spring-framework,
//     spring-web/src/main/java/org/springframework/web/filter/HiddenHttpMethodFilter.java)
//     reads the request parameter: the query string's first, then the
//     form body's.
//
// Each is one more method override (target.go): the method it names is
// one an upstream may apply, and one that disagrees with another, or with
// an override header, is ambiguous.
const methodParam = "_method"

// isMethodParam reports whether a parameter named name is methodParam to
// an upstream. PHP, which parses the parameters Laravel and Symfony read,
// drops the leading spaces of a name and reads a '.', a ' ' or a '['
// never closed in it as '_' (php-src, main/php_variables.c,
// php_register_variable_ex): ".method" and " [method" are _method there.
func isMethodParam(name string) bool {
	name = strings.TrimLeft(name, " ")
	if len(name) != len(methodParam) || name[1:] != methodParam[1:] {
		return false
	}
	switch name[0] {
	case '_', '.', '[':
		return true
	}
	return false
}

// param is a _method parameter: its name as sent, and its value.
type param struct{ name, value string }

// methodParams returns the _method parameters of values, ordered by name
// and then as sent.
func methodParams(values url.Values) []param {
	var names []string
	for name := range values {
		if isMethodParam(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var out []param
	for _, name := range names {
		for _, v := range values[name] {
			out = append(out, param{name, v})
		}
	}
	return out
}

// Media types whose body is form parameters.
const (
	formURLEncoded = "application/x-www-form-urlencoded"
	formMultipart  = "multipart/form-data"
)

// methodsMatter reports whether a method read from a POST could change the
// route it takes, or whether it is protected: a pattern names a method, or
// a route protects some method and not POST.
func methodsMatter(patterns []string, routes ...*route) bool {
	for _, p := range patterns {
		if i := strings.IndexAny(p, " \t"); i > 0 && !strings.Contains(p[:i], "/") {
			return true // "DELETE /v1/accounts/{id}"
		}
	}
	for _, rt := range routes {
		if len(rt.methods) > 0 && !rt.protects(http.MethodPost) && !rt.disabled {
			return true
		}
	}
	return false
}

// readMethodParams adds to t the methods that r's _method parameters
// name, in its query string and in its form or JSON body, and their values
// to its fingerprint. It reads at most limit bytes of the body, and only of
// a form or JSON (bodyKind): body is what it read, whole when that is all
// of it, and r.Body reads it again, then the rest, so that the body is
// forwarded as sent. A whole body is read again through rd (a new reader
// when rd is nil), which must outlive every reader of r. A _method past
// the first limit bytes is not seen.
//
// A request without such a parameter costs little: the query string is
// parsed only when it holds "method" or an escape, the body read only when
// its Content-Type is a form's or JSON, and JSON parsed only when its
// bytes could spell the name (mayNameMethodParam).
func readMethodParams(r *http.Request, t *target, limit int64, rd *memoryBody) (body []byte, whole bool) {
	if q := r.URL.RawQuery; strings.Contains(q, "method") || strings.Contains(q, "%") {
		values, _ := url.ParseQuery(q) // the pairs it can read, as Symfony and Spring read them
		t.addParams("query", methodParams(values))
	}
	form, isJSON := bodyKind(r)
	if form == "" && !isJSON {
		return nil, false
	}
	body, whole, err := readPrefix(r.Body, r.ContentLength, limit)
	if whole {
		if rd == nil {
			rd = new(memoryBody)
		}
		rd.Reset(body)
		r.Body = rd // the server closes what it read from
	} else {
		r.Body = prefixedBody(body, r.Body)
	}
	if err != nil {
		return nil, false // the upstream gets what arrived, and the same failure
	}
	if form != "" {
		t.addParams("body", formValues(r, form, body, whole))
	}
	if isJSON {
		t.addParams("json", jsonValues(body))
	}
	return body, whole
}

// bodyKind returns the media type of r's body when that is a form whose
// parameters an upstream reads (formBody), and whether it is JSON to
// Laravel (isJSONType). A body may be both: Rack reads the form, Laravel
// the JSON.
func bodyKind(r *http.Request) (form string, isJSON bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return "", false
	}
	ct := r.Header["Content-Type"]
	if len(ct) == 0 {
		return formURLEncoded, false // Rack reads a POST's body without a Content-Type as url-encoded
	}
	return formBody(ct[0]), isJSONType(ct[0])
}

// formBody returns the media type of a body of Content-Type ct when that
// is a form whose parameters an upstream reads: url-encoded or multipart.
func formBody(ct string) string {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(mt)
	switch {
	case strings.EqualFold(mt, formURLEncoded):
		return formURLEncoded
	case strings.EqualFold(mt, formMultipart):
		return formMultipart
	}
	return ""
}

// isJSONType reports whether a body of Content-Type ct is JSON whose
// top-level members Laravel reads as its form parameters, _method among
// them: Request::createFromBase replaces the form parameters with the
// JSON input when isJson says the Content-Type contains "/json" or
// "+json" (laravel/framework, src/Illuminate/Http/Request.php and
// src/Illuminate/Http/Concerns/InteractsWithContentTypes.php). Laravel
// compares in the case sent; the proxy in any case, a reading broader
// than Laravel's. gRPC and Connect streams are left out: no Laravel app
// serves them, and reading their body before routing would hold a stream
// whose client waits for an answer.
func isJSONType(ct string) bool {
	if grpcwire.IsGRPC(ct) || hasPrefixFold(ct, "application/connect+") {
		return false
	}
	return holdsFold(ct, "/json") || holdsFold(ct, "+json")
}

// holdsFold reports whether s holds sub, ASCII letters compared in any
// case; sub is lower-case.
func holdsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if hasPrefixFold(s[i:], sub) {
			return true
		}
	}
	return false
}

// hasPrefixFold reports whether s starts with prefix, ASCII letters
// compared in any case; prefix is lower-case.
func hasPrefixFold(s, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}

// jsonValues returns the _method parameters of a JSON body, of which
// body is what was read: its top-level "_method" members, named exactly
// (json_decode is case-sensitive, and Laravel reads the JSON's names as
// they are, without the renaming PHP gives form names). A member whose
// value is not a string names no method (Symfony's getMethod then keeps
// POST). Repeated, the member is every one of its values, which must
// agree: PHP's json_decode keeps the last (php-src,
// ext/json/json_parser.y), another reader may keep the first or refuse
// the body. Of a body cut short, the members read whole count; nested
// ones never do.
func jsonValues(body []byte) []param {
	if !mayNameMethodParam(body) {
		return nil
	}
	var found [2][]byte
	var out []param
	for _, v := range jsonread.AppendMembers(found[:0], body, methodParam) {
		if v[0] == '"' {
			out = append(out, param{methodParam, jsonread.Unquote(v)})
		}
	}
	return out
}

// mayNameMethodParam reports whether a JSON text could hold a member
// named "_method": a JSON string spells each character as itself or as
// a \u escape, so such a text holds "_method" with its quotes, or a
// \u escape of one of its characters (\u005f, \u006d...). Other \u escapes
// — of accented letters, say — do not make a body parsed.
func mayNameMethodParam(body []byte) bool {
	if bytes.Contains(body, []byte(`"_method"`)) {
		return true
	}
	for i := 0; ; {
		j := bytes.Index(body[i:], []byte(`\u00`))
		if j < 0 || i+j+6 > len(body) {
			return false
		}
		i += j + 4
		var c [1]byte
		if _, err := hex.Decode(c[:], body[i:i+2]); err == nil && strings.IndexByte(methodParam, c[0]) >= 0 {
			return true
		}
	}
}

// readPrefix reads body up to limit bytes: all of it, whole, when it is no
// longer, as readBody reads it; its first limit bytes otherwise.
func readPrefix(body io.Reader, length, limit int64) (read []byte, whole bool, err error) {
	if length >= 0 && length <= limit {
		read = make([]byte, length)
		n, err := io.ReadFull(body, read)
		return read[:n], err == nil, err
	}
	if length > limit {
		read = make([]byte, limit)
		n, err := io.ReadFull(body, read)
		return read[:n], false, err
	}
	read, err = io.ReadAll(io.LimitReader(body, limit+1))
	if int64(len(read)) > limit {
		return read, false, err
	}
	return read, err == nil, err
}

// formValues returns the _method parameters of a form body of mediaType,
// of which body is what was read: the body, or its first bytes (whole
// false), in which a parameter cut short is not read.
func formValues(r *http.Request, mediaType string, body []byte, whole bool) []param {
	if mediaType == formURLEncoded {
		if !whole {
			i := bytes.LastIndexByte(body, '&')
			body = body[:max(i, 0)]
		}
		if !bytes.Contains(body, []byte("method")) && !bytes.Contains(body, []byte("%")) {
			return nil
		}
		values, _ := url.ParseQuery(string(body))
		return methodParams(values)
	}
	_, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || params["boundary"] == "" {
		return nil
	}
	var out []param
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		// Raw: Rack, Symfony (PHP) and Spring (Tomcat) read a part's bytes
		// without decoding a Content-Transfer-Encoding.
		part, err := mr.NextRawPart()
		if err != nil {
			return out // the end, or a part the read prefix cut short
		}
		if !isMethodParam(part.FormName()) || part.FileName() != "" {
			continue // a file named _method is no method to any of them
		}
		v, err := io.ReadAll(part)
		if err != nil {
			return out
		}
		out = append(out, param{part.FormName(), string(v)})
	}
}

// addParams adds the methods that ps, _method parameters read from
// where, name, and adds them to the fingerprint: after the override
// headers, each on a line of its own, escaped so that no name or value
// can spell another's line. An empty value names no method (Rack, Spring
// and Laravel ignore it).
func (t *target) addParams(where string, ps []param) {
	if len(ps) == 0 {
		return
	}
	var fp strings.Builder
	fp.WriteString(t.fpMethod)
	for _, p := range ps {
		fp.WriteString("\n" + where + " " + url.QueryEscape(p.name) + "=" + url.QueryEscape(p.value))
		if p.value != "" {
			t.addNamed(upperASCII(p.value))
		}
	}
	t.fpMethod = fp.String()
	if len(t.named) > 0 {
		t.method = t.named[0]
	}
}
