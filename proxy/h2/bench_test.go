package h2_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The forwarder benchmarks run raw HTTP/2 peers that allocate nothing per
// call (pre-sized buffers, HPACK without a dynamic table, reused frames), so
// allocs/op is the forwarder's own. Each call is a unary exchange: request
// HEADERS and body, response HEADERS, body and trailers, closed loop on one
// connection; "direct" is the same client against the same upstream, in the
// same run, for the difference.

const benchFrame = 16384

// rawEncoder encodes header blocks with no dynamic table, so a block costs
// no allocation and depends on nothing sent before.
type rawEncoder struct {
	buf bytes.Buffer
	enc *hpack.Encoder
}

func newRawEncoder() *rawEncoder {
	e := &rawEncoder{}
	e.enc = hpack.NewEncoder(&e.buf)
	e.enc.SetMaxDynamicTableSizeLimit(0)
	return e
}

func (e *rawEncoder) block(fields ...hpack.HeaderField) []byte {
	e.buf.Reset()
	for _, f := range fields {
		e.enc.WriteField(f)
	}
	return e.buf.Bytes()
}

var (
	reqFields = []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/inference.GRPCInferenceService/ModelInfer"}, {Name: ":authority", Value: "bench"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	}
	respFields    = []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}}
	trailerFields = []hpack.HeaderField{{Name: "grpc-status", Value: "0"}}
)

// benchUpstream answers every request whose body ended with a response body
// of the request's size.
func benchUpstream(b testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serveBenchUpstream(c)
		}
	}()
	return l.Addr().String()
}

func serveBenchUpstream(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 64<<10)
	bw := bufio.NewWriterSize(c, 64<<10)
	pre := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(br, pre); err != nil {
		return
	}
	fr := http2.NewFramer(bw, br)
	fr.SetReuseFrames()
	enc := newRawEncoder()
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	fr.WriteWindowUpdate(0, 1<<30)
	bw.Flush()
	payload := make([]byte, benchFrame)
	got := map[uint32]int{}
	owed := 0
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		d, ok := f.(*http2.DataFrame)
		if !ok {
			continue
		}
		got[d.StreamID] += len(d.Data())
		// Credit in batches, as real servers do (a quarter of the window).
		if owed += len(d.Data()); owed >= 256<<10 || d.StreamEnded() && owed > 0 {
			fr.WriteWindowUpdate(0, uint32(owed))
			owed = 0
		}
		if !d.StreamEnded() {
			continue
		}
		id, n := d.StreamID, got[d.StreamID]
		delete(got, id)
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: enc.block(respFields...), EndHeaders: true})
		for n > 0 {
			k := min(n, benchFrame)
			fr.WriteData(id, false, payload[:k])
			n -= k
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: enc.block(trailerFields...), EndHeaders: true, EndStream: true})
		if br.Buffered() == 0 {
			bw.Flush()
		}
	}
}

// benchClient makes unary calls on one connection.
type benchClient struct {
	c       net.Conn
	bw      *bufio.Writer
	fr      *http2.Framer
	enc     *rawEncoder
	id      uint32
	body    []byte
	connWin int64
	strWin  int64 // the peer's initial stream window
	owed    int
}

func newBenchClient(b testing.TB, addr string, size int) *benchClient {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	bc := &benchClient{c: c, bw: bufio.NewWriterSize(c, 64<<10), enc: newRawEncoder(), id: 1, body: make([]byte, size), connWin: 65535, strWin: 65535}
	bc.fr = http2.NewFramer(bc.bw, bufio.NewReaderSize(c, 64<<10))
	bc.fr.SetReuseFrames()
	bc.bw.WriteString(http2.ClientPreface)
	bc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	bc.fr.WriteWindowUpdate(0, 1<<30)
	bc.bw.Flush()
	return bc
}

// call makes one exchange; the body fits the peer's windows (checked).
func (bc *benchClient) call(b testing.TB) {
	id := bc.id
	bc.id += 2
	bc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: bc.enc.block(reqFields...), EndHeaders: true})
	for bc.connWin < int64(len(bc.body)) || bc.strWin < int64(len(bc.body)) {
		if bc.strWin < int64(len(bc.body)) && bc.strWin != 65535 {
			b.Fatalf("a %d-byte body does not fit the stream window %d", len(bc.body), bc.strWin)
		}
		bc.bw.Flush()
		if !bc.read(b, 0) {
			break
		}
	}
	for off := 0; off < len(bc.body); off += benchFrame {
		end := min(off+benchFrame, len(bc.body))
		bc.fr.WriteData(id, end == len(bc.body), bc.body[off:end])
	}
	bc.connWin -= int64(len(bc.body))
	bc.bw.Flush()
	for bc.read(b, id) {
	}
}

// read handles one frame; it reports false once stream id's trailers came
// (id 0: after any one frame that is not a window update... for windows).
func (bc *benchClient) read(b testing.TB, id uint32) bool {
	f, err := bc.fr.ReadFrame()
	if err != nil {
		b.Fatal(err)
	}
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if !f.IsAck() {
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
				bc.strWin = int64(v)
			}
			bc.fr.WriteSettingsAck()
		}
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			bc.connWin += int64(f.Increment)
		}
		return id != 0 || bc.connWin < int64(len(bc.body))
	case *http2.DataFrame:
		if bc.owed += len(f.Data()); bc.owed >= 256<<10 {
			bc.fr.WriteWindowUpdate(0, uint32(bc.owed))
			bc.owed = 0
		}
	case *http2.HeadersFrame:
		if f.StreamID == id && f.StreamEnded() {
			return false
		}
	case *http2.RSTStreamFrame:
		b.Fatalf("stream %d reset: %v", f.StreamID, f.ErrCode)
	case *http2.GoAwayFrame:
		b.Fatalf("GOAWAY %v", f.ErrCode)
	}
	return true
}

func BenchmarkForwarder(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"8B", 8}, {"1MiB", 1 << 20}} {
		up := benchUpstream(b)
		fwd, _ := startForwarder(b, up, nopObserver{})
		for _, path := range []struct{ name, addr string }{{"direct", up}, {"forwarder", fwd}} {
			b.Run(size.name+"/"+path.name, func(b *testing.B) {
				bc := newBenchClient(b, path.addr, size.n)
				bc.call(b) // settings exchanged, windows open
				b.SetBytes(int64(2 * size.n))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					bc.call(b)
				}
				b.StopTimer()
				frames := 2 * ((size.n + benchFrame - 1) / benchFrame)
				b.ReportMetric(float64(frames), "DATA-frames/op")
			})
		}
	}
}

// TestForwarderAllocatesNothingPerDataFrame keeps BenchmarkForwarder's
// figure true in every test run: the forwarder's allocations a call are
// the same for 2 DATA frames (8 B each way) and 128 (1 MiB), the direct
// run's difference (the client's own) taken off. A variable escaping in a
// read loop once cost one allocation a frame for a day unseen.
func TestForwarderAllocatesNothingPerDataFrame(t *testing.T) {
	up := benchUpstream(t)
	fwd, _ := startForwarder(t, up, nopObserver{})
	allocs := func(addr string, size int) float64 {
		r := testing.Benchmark(func(b *testing.B) {
			bc := newBenchClient(b, addr, size)
			bc.call(b) // settings exchanged, windows open
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				bc.call(b)
			}
		})
		if r.N == 0 {
			t.Fatalf("%d-byte calls to %s failed", size, addr)
		}
		return float64(r.MemAllocs) / float64(r.N)
	}
	const small, large = 8, 1 << 20
	frames := float64(2 * ((large+benchFrame-1)/benchFrame - 1))
	direct := allocs(up, large) - allocs(up, small)
	forwarded := allocs(fwd, large) - allocs(fwd, small)
	if per := (forwarded - direct) / frames; per > 0.1 {
		t.Errorf("the forwarder allocates %.2f times a DATA frame (%.1f more a call for 1 MiB than for 8 B, the client's own %.1f taken off), want 0",
			per, forwarded, direct)
	}
}
