package proxy

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"
)

func TestBodyBufSizes(t *testing.T) {
	for _, tc := range []struct{ n, cap int }{
		{0, 1 << 10}, {1, 1 << 10}, {1 << 10, 1 << 10}, {1<<10 + 1, 2 << 10},
		{7843, 8 << 10}, {32<<10 + 1, 64 << 10}, {smallBodyBytes, smallBodyBytes},
		{smallBodyBytes + 1, 2 * smallBodyBytes}, {1<<20 + 1, 2 << 20}, {1 << 24, 1 << 24},
		{1<<24 + 1, 1<<24 + 1}, // past the pools: made to size
	} {
		bb := getBodyBuf(tc.n)
		if len(bb.b) != tc.n || cap(bb.b) != tc.cap || bb.refs.Load() != 1 {
			t.Errorf("getBodyBuf(%d): len %d cap %d holds %d, want cap %d held once", tc.n, len(bb.b), cap(bb.b), bb.refs.Load(), tc.cap)
		}
		bb.unref()
	}
}

// Each reader holds the buffer until it is closed, once.
func TestBodyBufReaders(t *testing.T) {
	bb := getBodyBuf(5)
	copy(bb.b, "hello")
	r1, r2 := bb.reader(), bb.reader()
	if got := bb.refs.Load(); got != 3 {
		t.Fatalf("two readers and the owner: %d holds", got)
	}
	for _, r := range []io.Reader{r1, r2} {
		if b, err := io.ReadAll(r); err != nil || string(b) != "hello" {
			t.Fatalf("read %q, %v", b, err)
		}
	}
	var w bytes.Buffer
	r3 := bb.reader()
	if n, err := io.Copy(&w, r3); err != nil || n != 5 || w.String() != "hello" {
		t.Fatalf("copy %d %q %v", n, w.String(), err)
	}
	r1.Close()
	r1.Close()
	r3.Close()
	if got := bb.refs.Load(); got != 2 {
		t.Fatalf("after closing two readers (one twice): %d holds, want 2", got)
	}
	if _, err := r1.Read(make([]byte, 1)); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("read after close: %v", err)
	}
	r2.Close()
	bb.unref()
	if got := bb.refs.Load(); got != 0 {
		t.Fatalf("all let go: %d holds", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("a release past the last hold did not panic")
		}
	}()
	bb.unref()
}

// blockingWriter blocks its first Write until release is closed.
type blockingWriter struct {
	entered, release chan struct{}
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	close(w.entered)
	<-w.release
	return len(p), nil
}

// A Close while the body is being written returns at once; the buffer is
// let go when the write ends, never under it.
func TestBodyBufCloseDuringWrite(t *testing.T) {
	bb := getBodyBuf(3)
	r := bb.reader()
	bb.unref() // the reader is the only holder
	w := &blockingWriter{entered: make(chan struct{}), release: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		io.Copy(w, r)
		close(done)
	}()
	<-w.entered
	closed := make(chan struct{})
	go func() {
		r.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the write")
	}
	if got := bb.refs.Load(); got != 1 {
		t.Fatalf("closed during a write: %d holds, want 1 until the write ends", got)
	}
	close(w.release)
	<-done
	if got := bb.refs.Load(); got != 0 {
		t.Fatalf("after the write: %d holds, want 0", got)
	}
}
