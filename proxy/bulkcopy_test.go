package proxy

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/inferwatch/inferwatch/record"
)

// readSizes reads from r, noting the size of every buffer it was given, at
// most step bytes a read (0: as much as fits).
type readSizes struct {
	r     io.Reader
	step  int
	sizes []int
}

func (s *readSizes) Read(p []byte) (int, error) {
	s.sizes = append(s.sizes, len(p))
	if s.step > 0 && len(p) > s.step {
		p = p[:s.step]
	}
	return s.r.Read(p)
}

// countingConn counts the writes that reach it.
type countingConn struct {
	net.Conn
	buf    bytes.Buffer
	writes int
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes++
	return c.buf.Write(p)
}

// TestUpstreamReadFromBulk: a request body net/http's transport streams
// into an upstream connection goes in bulk pieces.
func TestUpstreamReadFromBulk(t *testing.T) {
	body := bytes.Repeat([]byte("0.1234567,"), 100000) // 1000000 bytes
	inner := &countingConn{}
	c := &closeNotifyConn{Conn: inner}
	src := &readSizes{r: bytes.NewReader(body)}
	n, err := io.Copy(c, src) // as persistConnWriter.ReadFrom does
	if err != nil || n != int64(len(body)) || !bytes.Equal(inner.buf.Bytes(), body) {
		t.Fatalf("copied %d of %d bytes (%v), same %v", n, len(body), err, bytes.Equal(inner.buf.Bytes(), body))
	}
	if want := (len(body) + bulkCopyBytes - 1) / bulkCopyBytes; inner.writes != want || src.sizes[0] != bulkCopyBytes {
		t.Fatalf("%d writes from reads of %d bytes, want %d of %d", inner.writes, src.sizes[0], want, bulkCopyBytes)
	}
}

// TestRelayGoesBulk: the relay reads a response in io.Copy-sized pieces
// until one read fills its buffer, then in bulk ones; a body that arrives
// in dribbles never takes the bulk buffer.
func TestRelayGoesBulk(t *testing.T) {
	for _, tc := range []struct {
		name      string
		step      int
		wantSizes []int // the first reads' buffer sizes
	}{
		{"bulk", 0, []int{32 << 10, bulkCopyBytes, bulkCopyBytes}},
		{"dribble", 100, []int{32 << 10, 32 << 10, 32 << 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := bytes.Repeat([]byte("x"), 1<<20)
			src := &readSizes{r: bytes.NewReader(body), step: tc.step}
			req := httptest.NewRequest("POST", "/v2/models/m/infer", nil)
			res := &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(src), ContentLength: -1, Request: req}
			rw := httptest.NewRecorder()
			(&Handler{}).relay(rw, &call{rec: &record.Call{}}, res)
			if !bytes.Equal(rw.Body.Bytes(), body) {
				t.Fatalf("relayed %d of %d bytes", rw.Body.Len(), len(body))
			}
			for i, want := range tc.wantSizes {
				if src.sizes[i] != want {
					t.Fatalf("read %d got a %d-byte buffer, want %d (sizes %v)", i, src.sizes[i], want, src.sizes[:len(tc.wantSizes)])
				}
			}
		})
	}
}
