// Package logbuf writes log lines to a file descriptor the way nginx's
// buffered access log does (its buffer= and flush=): lines gather in a
// bounded buffer and reach the descriptor in one write when the buffer is
// full, when a line that must not wait is written, on Flush or Close, and
// at the latest a bounded delay after the first line was buffered. One
// system call then carries hundreds of access lines instead of one each,
// and no request waits on the descriptor while another's line is written.
//
// Nothing is dropped: a line that does not fit has its writer write the
// buffer out first, and wait for it as every writer waited for every line
// before the buffer. What a crash (SIGKILL, a runtime fatal error) leaves
// in the buffer is lost: at most Delay's worth of lines.
package logbuf

import (
	"io"
	"sync"
	"time"
)

const (
	// Size is the buffer a process's log gathers in: about 300 access lines.
	Size = 64 << 10
	// Delay bounds how long a buffered line waits for its write: a log
	// collector tailing stderr sees every line within it.
	Delay = time.Second
)

// Writer buffers whole lines for out. Each Write must be whole lines (a
// slog handler and the access log write one line a call), so that a full
// buffer is written out between two lines, never inside one.
type Writer struct {
	out   io.Writer
	size  int
	delay time.Duration

	wmu sync.Mutex // held while writing out: one write at a time, in order

	mu     sync.Mutex // guards what follows
	buf    []byte
	spare  []byte // the buffer last written out, reused
	timer  *time.Timer
	armed  bool // the timer will flush what is buffered
	closed bool // writes go straight to out
}

// New returns a Writer that buffers up to size bytes for out and writes
// them out at the latest delay after the first of them.
func New(out io.Writer, size int, delay time.Duration) *Writer {
	return &Writer{out: out, size: size, delay: delay}
}

// Write buffers p. It returns once p is buffered (or, on a full buffer,
// once the buffer ahead of it is written out); a failure of the write that
// later carries p is Flush's to report, as it cannot be p's alone.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	for !w.closed && len(w.buf) > 0 && len(w.buf)+len(p) > w.size {
		w.mu.Unlock()
		_ = w.Flush()
		w.mu.Lock()
	}
	if w.closed {
		w.mu.Unlock()
		return w.writeThrough(p)
	}
	w.buf = append(w.buf, p...)
	full := len(w.buf) >= w.size // a line of size bytes or more goes at once
	if !full && !w.armed {
		w.armed = true
		if w.timer == nil {
			w.timer = time.AfterFunc(w.delay, w.timed)
		} else {
			w.timer.Reset(w.delay)
		}
	}
	w.mu.Unlock()
	if full {
		_ = w.Flush()
	}
	return len(p), nil
}

// timed is the delay's flush.
func (w *Writer) timed() {
	w.mu.Lock()
	w.armed = false
	w.mu.Unlock()
	_ = w.Flush()
}

// Flush writes out what is buffered, after what earlier flushes took.
func (w *Writer) Flush() error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	return w.writeOut()
}

// writeOut writes the buffer out; w.wmu is held.
func (w *Writer) writeOut() error {
	w.mu.Lock()
	p := w.buf
	w.buf, w.spare = w.spare[:0], nil
	w.mu.Unlock()
	var err error
	if len(p) > 0 {
		_, err = w.out.Write(p)
	}
	if cap(p) > 4*w.size {
		p = nil // one huge line does not keep its buffer for good
	}
	w.mu.Lock()
	w.spare = p[:0]
	w.mu.Unlock()
	return err
}

// Close writes out what is buffered and stops the delay's timer; later
// writes go straight to out, after it. A process closes its Writer before
// it exits, so that no line is left behind at a SIGTERM.
func (w *Writer) Close() error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.mu.Lock()
	w.closed = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
	return w.writeOut()
}

func (w *Writer) writeThrough(p []byte) (int, error) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	return w.out.Write(p)
}

// Immediate returns a writer of lines that must not wait (warnings, a
// start or a stop): each is added after the lines buffered before it, and
// the buffer is written out at once, so the order of lines holds.
func (w *Writer) Immediate() io.Writer { return immediate{w} }

type immediate struct{ w *Writer }

func (i immediate) Write(p []byte) (int, error) {
	n, _ := i.w.Write(p)
	return n, i.w.Flush()
}
