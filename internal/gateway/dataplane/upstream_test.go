package dataplane

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestTakesFastPath(t *testing.T) {
	get := func(mod func(r *http.Request)) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, "http://backend/", nil)
		mod(r)
		return r
	}
	for _, tc := range []struct {
		name string
		r    *http.Request
		want bool
	}{
		{"GET", get(func(*http.Request) {}), true},
		{"HEAD", get(func(r *http.Request) { r.Method = http.MethodHead }), true},
		{"OPTIONS", get(func(r *http.Request) { r.Method = http.MethodOptions }), true},
		{"POST without a body", get(func(r *http.Request) { r.Method = http.MethodPost }), false},
		{"DELETE", get(func(r *http.Request) { r.Method = http.MethodDelete }), false},
		{"GET with a body", get(func(r *http.Request) { r.Body, r.ContentLength = io.NopCloser(strings.NewReader("x")), 1 }), false},
		{"GET chunked", get(func(r *http.Request) { r.TransferEncoding = []string{"chunked"} }), false},
		{"upgrade", get(func(r *http.Request) { r.Header.Set("Upgrade", "websocket") }), false},
		{"TLS backend", get(func(r *http.Request) { r.URL.Scheme = "https" }), false},
	} {
		if got := takesFastPath(tc.r); got != tc.want {
			t.Errorf("%s: takesFastPath %v, want %v", tc.name, got, tc.want)
		}
	}
}

// scriptedBackend is a raw HTTP/1.1 backend: answer writes what it likes
// for the n-th request on a connection (n from 0) and says whether to go
// on reading requests. It counts the connections it accepted and reports
// each one's end.
type scriptedBackend struct {
	addr     string
	accepted atomic.Int32
	ended    chan struct{}
}

func newScriptedBackend(t *testing.T, answer func(c net.Conn, n int) bool) *scriptedBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	b := &scriptedBackend{addr: ln.Addr().String(), ended: make(chan struct{}, 100)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.accepted.Add(1)
			go func() {
				defer func() { b.ended <- struct{}{} }()
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 0; ; n++ {
					if skipHeaders(br) != nil || !answer(c, n) {
						return
					}
				}
			}()
		}
	}()
	return b
}

// fastProxy is a data plane whose one route sends everything to backend.
func fastProxy(t *testing.T, backend string) (*Proxy, string) {
	t.Helper()
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(&Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{{
		Route: "ns/r", Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: backend, Weight: 1}},
	}}}}}}}); err != nil {
		t.Fatal(err)
	}
	return p, "http://" + l.at(t, "tcp/80")
}

func fetch(t *testing.T, client *http.Client, method, url string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

func TestFastPathKeepsConnections(t *testing.T) {
	b := newScriptedBackend(t, func(c net.Conn, _ int) bool {
		_, err := io.WriteString(c, okAnswer)
		return err == nil
	})
	p, url := fastProxy(t, b.addr)
	for range 20 {
		if resp, body := fetch(t, http.DefaultClient, http.MethodGet, url); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("answer %d %q", resp.StatusCode, body)
		}
	}
	if n := b.accepted.Load(); n != 1 {
		t.Errorf("20 requests one after another opened %d backend connections, want 1", n)
	}
	if n := p.backends.fast.idleConns(b.addr); n != 1 {
		t.Errorf("%d idle connections kept, want 1", n)
	}
}

// A backend closing a kept connection while it is idle costs no request:
// the request is sent again on a new connection.
func TestFastPathSendsAgainOnAConnectionClosedWhileIdle(t *testing.T) {
	b := newScriptedBackend(t, func(c net.Conn, _ int) bool {
		_, _ = io.WriteString(c, okAnswer)
		return false // and close, without saying so
	})
	_, url := fastProxy(t, b.addr)
	for i := range 10 {
		if resp, body := fetch(t, http.DefaultClient, http.MethodGet, url); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d: answer %d %q", i, resp.StatusCode, body)
		}
	}
}

// A client leaving in the middle of a long answer closes the backend
// connection; the rest of the body is not read.
func TestFastPathClientLeavingClosesTheBackendConnection(t *testing.T) {
	b := newScriptedBackend(t, func(c net.Conn, _ int) bool {
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", 1<<30)
		chunk := make([]byte, 64<<10)
		// Sends until the proxy closes the connection (bounded: 1 GiB).
		for range 1 << 14 {
			if _, err := c.Write(chunk); err != nil {
				return false
			}
		}
		return false
	})
	p, url := fastProxy(t, b.addr)
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 100<<10)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // the client's connection closes with it
	select {
	case <-b.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the backend connection is still open 10 s after the client left")
	}
	if n := p.backends.fast.idleConns(b.addr); n != 0 {
		t.Errorf("a connection left mid-answer was kept (%d idle)", n)
	}
}

func TestFastPathBoundsResponseHeaders(t *testing.T) {
	b := newScriptedBackend(t, func(c net.Conn, _ int) bool {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Big: ")
		chunk := strings.Repeat("a", 1<<10)
		for range 11 << 10 { // a header of 11 MiB
			if _, err := io.WriteString(c, chunk); err != nil {
				return false
			}
		}
		_, _ = io.WriteString(c, "\r\nContent-Length: 2\r\n\r\nok")
		return false
	})
	_, url := fastProxy(t, b.addr)
	if resp, _ := fetch(t, http.DefaultClient, http.MethodGet, url); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("11 MiB of response headers: %d, want 503", resp.StatusCode)
	}
}

// The framings of an answer: each is read to its end and the connection
// kept, or closed where it cannot be used again.
func TestFastPathFramings(t *testing.T) {
	for _, tc := range []struct {
		name, method, answer string
		wantCode             int
		wantBody             string
		wantKept             bool
		wantEarlyHints       bool
	}{
		{name: "content length", answer: okAnswer, wantCode: 200, wantBody: "ok", wantKept: true},
		{name: "chunked with a trailer", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n2\r\nok\r\n0\r\nX-Sum: 1\r\n\r\n", wantCode: 200, wantBody: "ok", wantKept: true},
		{name: "HEAD", method: http.MethodHead, answer: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", wantCode: 200, wantKept: true},
		{name: "no content", answer: "HTTP/1.1 204 No Content\r\n\r\n", wantCode: 204, wantKept: true},
		{name: "early hints", answer: "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" + okAnswer, wantCode: 200, wantBody: "ok", wantKept: true, wantEarlyHints: true},
		{name: "too many informational answers", answer: strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n", 6) + okAnswer, wantCode: 503, wantBody: "backend unreachable\n", wantEarlyHints: true},
		{name: "connection close", answer: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", wantCode: 200, wantBody: "ok"},
		{name: "until the connection ends", answer: "HTTP/1.1 200 OK\r\n\r\nok", wantCode: 200, wantBody: "ok"},
		{name: "bytes after the answer", answer: okAnswer + "HTTP/1.1 200 OK\r\n", wantCode: 200, wantBody: "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newScriptedBackend(t, func(c net.Conn, _ int) bool {
				_, err := io.WriteString(c, tc.answer)
				return err == nil && tc.wantKept
			})
			p, url := fastProxy(t, b.addr)
			method := tc.method
			if method == "" {
				method = http.MethodGet
			}
			var hints atomic.Bool
			req, _ := http.NewRequest(method, url, nil)
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
					hints.Store(code == 103 && h.Get("Link") != "")
					return nil
				},
			}))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != tc.wantCode || string(body) != tc.wantBody {
				t.Fatalf("answer %d %q (%v), want %d %q", resp.StatusCode, body, err, tc.wantCode, tc.wantBody)
			}
			if hints.Load() != tc.wantEarlyHints {
				t.Errorf("103 Early Hints passed on: %v, want %v", hints.Load(), tc.wantEarlyHints)
			}
			if tc.name == "chunked with a trailer" && resp.Trailer.Get("X-Sum") != "1" {
				t.Errorf("trailer %v, want X-Sum: 1", resp.Trailer)
			}
			// The answer was read to its end before the client had it, so
			// the connection is back in the pool or closed by now.
			if kept := p.backends.fast.idleConns(b.addr) == 1; kept != tc.wantKept {
				t.Errorf("connection kept: %v, want %v", kept, tc.wantKept)
			}
		})
	}
}

func TestFastPathClosesIdleConnections(t *testing.T) {
	b := newScriptedBackend(t, func(c net.Conn, _ int) bool {
		_, err := io.WriteString(c, okAnswer)
		return err == nil
	})
	p, url := fastProxy(t, b.addr)
	p.backends.fast.idleTimeout = 50 * time.Millisecond
	fetch(t, http.DefaultClient, http.MethodGet, url)
	select {
	case <-b.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("an idle backend connection is still open 10 s after its 50 ms idle timeout")
	}
	if n := p.backends.fast.idleConns(b.addr); n != 0 {
		t.Errorf("%d idle connections still listed after their timeout", n)
	}
}
