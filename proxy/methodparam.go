package proxy

import (
	"bytes"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strings"
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
//     reads it from the form body, then from the query string.
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

// readsMethodParams reports whether tb reads the _method parameters of a
// request read as t: it is a POST, and a method it names could change the
// request's route or whether it is protected (methodsMatter).
func (tb *routeTable) readsMethodParams(t *target) bool {
	return tb.methodsMatter && t.own == http.MethodPost
}

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
// name, in its query string and in its form body, and their values to its
// fingerprint. It reads at most limit bytes of the body, and only of a
// form (formBody): body is what it read, whole when that is all of it,
// and r.Body reads it again, then the rest, so that the body is forwarded
// as sent. A _method past the first limit bytes is not seen.
//
// A request without such a parameter costs nothing: the query string is
// parsed only when it holds "method" or an escape, and the body read only
// when its Content-Type is a form's.
func readMethodParams(r *http.Request, t *target, limit int64) (body []byte, whole bool) {
	if q := r.URL.RawQuery; strings.Contains(q, "method") || strings.Contains(q, "%") {
		values, _ := url.ParseQuery(q) // the pairs it can read, as Symfony and Spring read them
		t.addParams("query", methodParams(values))
	}
	mediaType, ok := formBody(r)
	if !ok {
		return nil, false
	}
	body, whole, err := readPrefix(r.Body, r.ContentLength, limit)
	if whole {
		r.Body = newBodyReader(body) // the server closes what it read from
	} else {
		r.Body = prefixedBody(body, r.Body)
	}
	if err != nil {
		return nil, false // the upstream gets what arrived, and the same failure
	}
	t.addParams("body", formValues(r, mediaType, body, whole))
	return body, whole
}

// formBody returns the media type of r's body when that is a form whose parameters an upstream reads: url-encoded, multipart, or
// none (Rack reads a POST's body without a Content-Type as url-encoded).
func formBody(r *http.Request) (string, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return "", false
	}
	ct := r.Header["Content-Type"]
	if len(ct) == 0 {
		return formURLEncoded, true
	}
	mt, _, _ := strings.Cut(ct[0], ";")
	mt = strings.TrimSpace(mt)
	switch {
	case strings.EqualFold(mt, formURLEncoded):
		return formURLEncoded, true
	case strings.EqualFold(mt, formMultipart):
		return formMultipart, true
	}
	return "", false
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
