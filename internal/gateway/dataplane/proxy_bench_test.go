package dataplane

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// BenchmarkProxyKeepAlive is one HTTP/1.1 request through the data plane
// on a keep-alive connection, to a keep-alive backend, with the metrics on
// as the product serves them. The client and the backend are raw sockets
// writing fixed bytes, so what -benchmem counts is, to a few allocations,
// the proxy's own: the figure that the garbage collector's share of a
// request follows. bench/dataplane measures the same path side by side with
// nginx, HAProxy and Caddy; this one is for profiling it.
func BenchmarkProxyKeepAlive(b *testing.B) {
	backend := rawBackend(b)
	var l loopback
	o := l.options()
	o.Log = logr.Discard()
	p := New(o)
	NewMetrics(prometheus.NewRegistry(), p)
	b.Cleanup(p.Close)
	if err := p.Apply(&Config{Gateway: "bench/bench", Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{
		Hostname: "r0.bench",
		Rules:    []Rule{{Route: "bench/r0", Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: backend, Weight: 1}}}},
	}}}}}); err != nil {
		b.Fatal(err)
	}
	c, err := net.Dial("tcp", l.at(b, "tcp/80"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := []byte("GET /items/42 HTTP/1.1\r\nHost: r0.bench\r\nUser-Agent: bench\r\n\r\n")
	br := bufio.NewReaderSize(c, 4096)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if code, err := readRawResponse(br); err != nil || code != 200 {
			b.Fatalf("answer %d, %v", code, err)
		}
	}
}

// rawBackend answers every request on a connection with the same 3 bytes,
// reading headers only (the benchmark sends no bodies).
func rawBackend(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					if err := skipHeaders(br); err != nil {
						return
					}
					if _, err := c.Write(answer); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// skipHeaders reads up to the blank line ending a message's headers.
func skipHeaders(br *bufio.Reader) error {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			return nil
		}
	}
}

// readRawResponse reads one response with a Content-Length body and
// returns its status code.
func readRawResponse(br *bufio.Reader) (int, error) {
	status, err := br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(status) < 12 {
		return 0, io.ErrUnexpectedEOF
	}
	code, err := strconv.Atoi(string(status[9:12]))
	if err != nil {
		return 0, err
	}
	length := -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(line) <= 2 {
			break
		}
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(k, []byte("Content-Length")) {
			if length, err = strconv.Atoi(string(bytes.TrimSpace(v))); err != nil {
				return 0, err
			}
		}
	}
	if length < 0 {
		return 0, io.ErrUnexpectedEOF
	}
	_, err = br.Discard(length)
	return code, err
}
