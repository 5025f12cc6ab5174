// Package syncio has Writer, an io.Writer that lets one write through at
// a time.
package syncio

import (
	"bytes"
	"io"
	"sync"
)

// Writer lets one Write through at a time, so that goroutines sharing an
// output do not interleave within a write: to the writer NewWriter gives
// it or, the zero value, to a buffer of its own that String reads (what a
// running command or server writes while a test reads it).
type Writer struct {
	mu  sync.Mutex
	w   io.Writer // nil: buf
	buf bytes.Buffer
}

// NewWriter returns a Writer to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

func (l *Writer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w == nil {
		return l.buf.Write(p)
	}
	return l.w.Write(p)
}

// String is what was written so far to the zero value's buffer.
func (l *Writer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
