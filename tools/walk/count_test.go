package main

import (
	"slices"
	"testing"
)

// A walk of the miss's kind, by hand: ServeHTTP asks request.go, comes
// back, goes on to execute.go, whose call runs on another goroutine and
// through the standard library (empty files), and comes back again.
func TestCountFollowsEntriesAndReturnsThroughFiles(t *testing.T) {
	steps := []step{
		{1, "proxy/handler.go", "(*Handler).ServeHTTP"},
		{1, "proxy/request.go", "newRequest"},
		{1, "proxy/request.go", "(*request).reset"}, // same file: same stay
		{1, "proxy/request.go", "newRequest"},
		{1, "proxy/handler.go", "(*Handler).ServeHTTP"},
		{1, "proxy/execute.go", "(*Handler).execute"},
		{2, "proxy/execute.go", "(*Handler).call"}, // another goroutine, same file
		{2, "", "httputil.(*ReverseProxy).ServeHTTP"},
		{2, "proxy/capture.go", "(*capture).WriteHeader"},
		{2, "", ""}, // back in the standard library: still in capture.go
		{2, "proxy/capture.go", "(*capture).Write"},
		{2, "proxy/execute.go", "(*Handler).call"},
		{1, "proxy/handler.go", "(*Handler).ServeHTTP"},
		{1, "", ""}, // ServeHTTP returned to the server
	}
	w := count(steps)
	var files []string
	for _, s := range w.stays {
		files = append(files, s.file)
	}
	want := []string{"proxy/handler.go", "proxy/request.go", "proxy/handler.go", "proxy/execute.go",
		"proxy/capture.go", "proxy/execute.go", "proxy/handler.go"}
	if !slices.Equal(files, want) {
		t.Errorf("stays = %q\nwant    %q", files, want)
	}
	if got, want := w.files, 4; got != want {
		t.Errorf("files = %d, want %d", got, want)
	}
	if got, want := w.returnCount(), 3; got != want {
		t.Errorf("returns = %d, want %d", got, want)
	}
	if got, want := w.returns, []bool{false, false, true, false, false, true, true}; !slices.Equal(got, want) {
		t.Errorf("returns = %v, want %v", got, want)
	}
	if got, want := w.stays[3].fn, "(*Handler).execute"; got != want {
		t.Errorf("the execute.go stay starts in %s, want %s", got, want)
	}
}

func TestCountOfNoStepIsEmpty(t *testing.T) {
	w := count([]step{{1, "", "main.main"}})
	if len(w.stays) != 0 || w.files != 0 || w.returnCount() != 0 {
		t.Errorf("count = %+v, want nothing", w)
	}
}

// walkrun prints an exit as the runtime names the function returned to;
// parse reads it as the module's file, and a file it does not count as
// outside the walk.
func TestParseReadsExitsAsTheModulesFiles(t *testing.T) {
	out := "request\tmiss\t201\n" +
		"enter\t7\tproxy/handler.go\t(*Handler).ServeHTTP\n" +
		"enter\t7\tproxy/request.go\tnewRequest\n" +
		"exit\t7\texample.com/m/proxy/handler.go\texample.com/m/proxy.(*Handler).ServeHTTP\n" +
		"exit\t7\tnet/http/server.go\tnet/http.HandlerFunc.ServeHTTP\n" +
		"request\thit\t201\n" +
		"enter\t7\tproxy/handler.go\t(*Handler).ServeHTTP\n"
	counted := map[string]bool{"proxy/handler.go": true, "proxy/request.go": true}
	got, err := parse([]byte(out), "example.com/m", counted)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].name != "miss" || got[0].status != 201 || got[1].name != "hit" {
		t.Fatalf("requests = %+v", got)
	}
	if w := got[0].walk; len(w.stays) != 3 || w.files != 2 || w.returnCount() != 1 {
		t.Errorf("miss: %d stays, %d files, %d returns; want 3, 2, 1: %+v", len(w.stays), w.files, w.returnCount(), w.stays)
	}
	if s := got[0].walk.stays[2]; s.file != "proxy/handler.go" || s.fn != "(*Handler).ServeHTTP" || s.goroutine != 7 {
		t.Errorf("the return to ServeHTTP reads as %+v", s)
	}
	if len(got[1].walk.stays) != 1 {
		t.Errorf("hit: %+v", got[1].walk.stays)
	}
	if _, err := parse([]byte("garbage\n"), "example.com/m", counted); err == nil {
		t.Error("parse took a line walkrun does not print")
	}
}
