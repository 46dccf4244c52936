package proxy

import (
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
