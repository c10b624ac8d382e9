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
