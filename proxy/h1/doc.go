// Package h1 serves the HTTP/1.1 connections of the frame data plane with
// its own connection loop, in front of the same http.Handler that proxies
// and records each call.
//
// net/http's server spends more per request than the proxying it serves: a
// background read goroutine per request (started when the body ends,
// aborted with a read deadline when the handler returns), a per-request
// context watcher and a textproto parse that allocates every header
// string. Here one goroutine per connection reads a request, runs the
// handler and writes the response, with one string allocation for all
// header bytes; a call is cancelled upstream when its client leaves (an
// LLM generation nobody reads any more), seen by one epoll set for every
// clear-text TCP connection at no cost per call, or by a read of the idle
// connection once a call has run for a while (Server.WatchAfter) where
// that set cannot look (TLS, other systems).
//
// One file, one job: server.go accepts, tracks and drains connections;
// request.go parses a request head and its framing; fields.go checks
// header lines and builds header maps for both request and response heads;
// body.go reads request bodies (Content-Length, chunked with trailers,
// 100-continue); response.go frames responses; hijack.go hands a
// connection to the handler for an upgraded protocol; watch.go watches an idle
// client connection during a call, and hangup_linux.go holds the epoll set
// that learns of a TCP client's FIN; upstream.go writes
// the upstream request of an in-memory body and reads the head of its
// answer, with net/http's writer and reader kept for every message off the
// common path.
package h1
