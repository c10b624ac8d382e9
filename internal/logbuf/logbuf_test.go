package logbuf

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// sink records every write it gets, and signals each on wrote.
type sink struct {
	mu     sync.Mutex
	writes []string
	wrote  chan struct{}
}

func newSink() *sink { return &sink{wrote: make(chan struct{}, 1024)} }

func (s *sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.writes = append(s.writes, string(p))
	s.mu.Unlock()
	s.wrote <- struct{}{}
	return len(p), nil
}

func (s *sink) all() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.writes, "")
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.writes)
}

// never is a delay no test waits for.
const never = time.Hour

func TestBufferedLinesWaitForOneWrite(t *testing.T) {
	out := newSink()
	w := New(out, Size, never)
	for i := range 100 {
		fmt.Fprintf(w, "line %d\n", i)
	}
	if n := out.count(); n != 0 {
		t.Fatalf("%d writes before a flush, want none: the lines are buffered", n)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := out.count(); n != 1 {
		t.Fatalf("%d writes for 100 lines, want 1", n)
	}
	if got := strings.Count(out.all(), "\n"); got != 100 {
		t.Errorf("%d lines written, want 100", got)
	}
}

// A buffered line reaches the output without any further write or flush:
// the delay's timer writes it out.
func TestBufferedLineIsWrittenOutAfterTheDelay(t *testing.T) {
	out := newSink()
	w := New(out, Size, time.Millisecond)
	w.Write([]byte("alone\n"))
	select {
	case <-out.wrote:
	case <-time.After(time.Minute):
		t.Fatal("a buffered line was never written out")
	}
	if got := out.all(); got != "alone\n" {
		t.Errorf("wrote %q, want the line", got)
	}
	w.Write([]byte("again\n")) // the timer is armed again after its flush
	select {
	case <-out.wrote:
	case <-time.After(time.Minute):
		t.Fatal("a line buffered after the first flush was never written out")
	}
}

// A full buffer is written out between two lines, and every line of every
// writer arrives whole: none dropped, none split.
func TestFullBufferIsWrittenOutNotDropped(t *testing.T) {
	out := newSink()
	w := New(out, 100, never)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 250 {
				fmt.Fprintf(w, "writer %d line %03d\n", g, i) // 18 bytes
			}
		})
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	seen := map[string]bool{}
	for _, wr := range out.writes {
		if len(wr) > 100 {
			t.Errorf("a write of %d bytes, over the buffer's 100", len(wr))
		}
		if !strings.HasSuffix(wr, "\n") {
			t.Errorf("a write ends inside a line: %q", wr)
		}
		for _, l := range strings.Split(strings.TrimSuffix(wr, "\n"), "\n") {
			if len(l) != 17 || seen[l] {
				t.Errorf("line %q split or repeated", l)
			}
			seen[l] = true
		}
	}
	if len(seen) != 1000 {
		t.Errorf("%d lines arrived, want 1000", len(seen))
	}
}

// An immediate line is written at once, after the lines buffered before
// it: order holds between the two kinds.
func TestImmediateLineFollowsTheBufferedOnes(t *testing.T) {
	out := newSink()
	w := New(out, Size, never)
	w.Write([]byte("access 1\n"))
	w.Write([]byte("access 2\n"))
	w.Immediate().Write([]byte("warning\n"))
	if got, want := out.all(), "access 1\naccess 2\nwarning\n"; got != want {
		t.Errorf("wrote %q, want %q", got, want)
	}
	w.Write([]byte("access 3\n"))
	w.Close()
	if got, want := out.all(), "access 1\naccess 2\nwarning\naccess 3\n"; got != want {
		t.Errorf("wrote %q, want %q", got, want)
	}
}

// Close writes out every line left, and what comes after it goes straight
// through, in order.
func TestCloseLeavesNoLineBehind(t *testing.T) {
	out := newSink()
	w := New(out, Size, never)
	w.Write([]byte("last request\n"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := out.all(); got != "last request\n" {
		t.Fatalf("after Close: %q, want the buffered line", got)
	}
	w.Write([]byte("late\n"))
	if got := out.all(); got != "last request\nlate\n" {
		t.Errorf("a write after Close: %q, want it written at once", got)
	}
}

// A line longer than the buffer goes out whole, in one write.
func TestLongLineGoesOutWhole(t *testing.T) {
	out := newSink()
	w := New(out, 16, never)
	w.Write([]byte("short\n"))
	long := bytes.Repeat([]byte("x"), 40)
	w.Write(append(long, '\n'))
	w.Close()
	out.mu.Lock()
	defer out.mu.Unlock()
	if len(out.writes) != 2 || out.writes[0] != "short\n" || out.writes[1] != string(long)+"\n" {
		t.Errorf("writes %q, want the short line, then the long one whole", out.writes)
	}
}
