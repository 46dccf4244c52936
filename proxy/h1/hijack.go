package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
)

// Hijack hands the connection over to the handler, as an upgrade (a
// WebSocket's 101) needs: the server stops watching it, no longer counts it
// for Shutdown, and never reads, writes or closes it again. The reader
// returned holds what the client sent after the request head.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c := w.c
	switch {
	case c.hijacked:
		return nil, nil, http.ErrHijacked
	case w.wroteHeader || w.headSent:
		return nil, nil, errors.New("h1: hijack after the response began")
	}
	if w.watch != nil {
		w.watch.stop() // a watching read returns, its byte kept in c.cr
	}
	if c.pollID != 0 {
		hangupPoller.forget(c.pollID)
		c.pollID = 0
	}
	if err := c.bw.Flush(); err != nil { // a 100 Continue, say
		return nil, nil, err
	}
	pending := make([]byte, 0, c.br.Buffered()+1)
	buffered, _ := c.br.Peek(c.br.Buffered())
	pending = append(pending, buffered...)
	if c.cr.hasByte {
		pending = append(pending, c.cr.b[0])
		c.cr.hasByte = false
	}
	c.hijacked = true
	w.headSent, w.err = true, http.ErrHijacked // later writes go nowhere
	c.srv.forget(c)
	r := bufio.NewReader(io.MultiReader(bytes.NewReader(pending), c.nc))
	return c.nc, bufio.NewReadWriter(r, bufio.NewWriter(c.nc)), nil
}
