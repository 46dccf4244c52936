package proxy

import (
	"bytes"
	"sync/atomic"
	"testing"
)

func TestCaptureBudget(t *testing.T) {
	var budget atomic.Int64
	budget.Store(10)
	a := &capture{max: 8, budget: &budget}
	b := &capture{max: 8, budget: &budget}
	a.write([]byte("12345678")) // takes 8 of 10
	b.write([]byte("abcd"))     // only 2 left: refused whole, truncated
	if string(a.buf) != "12345678" || a.truncated || len(b.buf) != 0 || !b.truncated {
		t.Fatalf("a=%q %v, b=%q %v", a.buf, a.truncated, b.buf, b.truncated)
	}
	b.write([]byte("x")) // a refused capture takes nothing more
	if len(b.buf) != 0 {
		t.Fatalf("b took %q after being refused", b.buf)
	}
	a.release()
	if budget.Load() != 10 {
		t.Fatalf("budget after release: %d", budget.Load())
	}
	c := &capture{max: 4}
	c.write([]byte("123456"))
	if string(c.buf) != "1234" || !c.truncated {
		t.Fatalf("unbudgeted capture: %q %v", c.buf, c.truncated)
	}
}

// TestCaptureAdopt: a whole body is captured in place, cut to the bound,
// charged to the budget like a copy, and refused whole when it does not fit.
func TestCaptureAdopt(t *testing.T) {
	var budget atomic.Int64
	budget.Store(10)
	bb := getBodyBuf(9)
	copy(bb.b, "123456789")
	body := bb.b
	a := &capture{max: 6, budget: &budget}
	a.adopt(bb)
	if string(a.buf) != "123456" || !a.truncated || &a.buf[0] != &body[0] || budget.Load() != 4 {
		t.Fatalf("a=%q truncated %v in place %v budget %d", a.buf, a.truncated, &a.buf[0] == &body[0], budget.Load())
	}
	if cap(a.buf) != 6 {
		t.Fatalf("the capture may reach past its bound: cap %d", cap(a.buf))
	}
	if bb.refs.Load() != 2 {
		t.Fatalf("the capture does not hold the buffer: %d holds", bb.refs.Load())
	}
	bb2 := getBodyBuf(6)
	copy(bb2.b, "abcdef")
	b := &capture{max: 8, budget: &budget}
	b.adopt(bb2) // 6 > the 4 left: refused
	if len(b.buf) != 0 || !b.truncated || budget.Load() != 4 || bb2.refs.Load() != 1 {
		t.Fatalf("b=%q truncated %v budget %d holds %d", b.buf, b.truncated, budget.Load(), bb2.refs.Load())
	}
	a.release()
	a.release() // a second release gives back nothing more
	if budget.Load() != 10 || bb.refs.Load() != 1 {
		t.Fatalf("budget after release: %d, buffer holds %d", budget.Load(), bb.refs.Load())
	}
	bb.unref()
	bb2.unref()
}

// TestCaptureGrows: a capture written piece by piece holds exactly the
// body's first max bytes in one pooled buffer, which goes back on release;
// a capture that adopted a shared buffer moves out of it to grow.
func TestCaptureGrows(t *testing.T) {
	out := bodyBufsOut.Load()
	var budget atomic.Int64
	budget.Store(1 << 30)
	body := bytes.Repeat([]byte("0.123456,"), 40000) // 360000 bytes
	c := &capture{max: 300000, budget: &budget}
	for p := body; len(p) > 0; p = p[min(len(p), 7000):] {
		c.write(p[:min(len(p), 7000)])
	}
	if !bytes.Equal(c.buf, body[:300000]) || !c.truncated || c.owned == nil || &c.owned.b[0] != &c.buf[0] {
		t.Fatalf("captured %d bytes (same as the body's prefix: %v), truncated %v, pooled %v", len(c.buf), bytes.Equal(c.buf, body[:len(c.buf)]), c.truncated, c.owned != nil)
	}
	if got := budget.Load(); got != 1<<30-300000 {
		t.Fatalf("budget charged %d bytes", 1<<30-got)
	}
	if bodyBufsOut.Load() != out+1 {
		t.Fatalf("%d pooled buffers held, want the one the capture lies in", bodyBufsOut.Load()-out)
	}
	c.release()
	if bodyBufsOut.Load() != out || budget.Load() != 1<<30 {
		t.Fatalf("after release: %d buffers held, budget %d", bodyBufsOut.Load()-out, budget.Load())
	}

	bb := getBodyBuf(4)
	copy(bb.b, "head")
	a := &capture{max: 100}
	a.adopt(bb)
	a.write([]byte(" tail"))
	if string(a.buf) != "head tail" || a.owned == bb || bb.refs.Load() != 1 {
		t.Fatalf("adopted then written: %q, still in the shared buffer %v, its holds %d", a.buf, a.owned == bb, bb.refs.Load())
	}
	if string(bb.b) != "head" {
		t.Fatalf("the shared buffer was written to: %q", bb.b)
	}
	a.release()
	bb.unref()
	if bodyBufsOut.Load() != out {
		t.Fatalf("%d pooled buffers not given back", bodyBufsOut.Load()-out)
	}
}
