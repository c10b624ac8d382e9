package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"testing"
)

// The checkout page's "How this page works" link opens in the browser as
// text, not as a download of text/markdown.
func TestCheckoutPageLinksItsReadmeAsText(t *testing.T) {
	page, err := os.ReadFile("../checkout/index.html")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`<a href="\./([^"]+\.md)">How this page works</a>`).FindSubmatch(page)
	if m == nil {
		t.Fatal(`examples/checkout/index.html has no "How this page works" link to a .md file`)
	}
	h := withSite("../..", handler(0))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/examples/checkout/"+string(m[1]), nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/plain; charset=utf-8" || rec.Body.Len() == 0 {
		t.Errorf("GET %s = %d, Content-Type %q, %d bytes; want 200 text/plain; charset=utf-8",
			m[1], rec.Code, rec.Header().Get("Content-Type"), rec.Body.Len())
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/examples/checkout/checkout.js", nil))
	if ct := rec.Header().Get("Content-Type"); ct != "text/javascript; charset=utf-8" {
		t.Errorf("checkout.js served as %q, want text/javascript: only the README changes type", ct)
	}
}
