package dataplane

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/poll"
)

// endless is a backend answering with up to 64 MiB, as fast as it is
// read.
func endless(t *testing.T) string {
	chunk := make([]byte, 32<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 2048 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// A client that asks for a large answer and then reads nothing holds
// the request's write: the stream idle timeout cuts it, over HTTP/1.1
// (the connection closed) and over HTTP/2 (the stream reset, the
// connection still serving its other streams). The request is counted
// once its handler returned, which it would never do with the write
// left blocked.
func TestStreamIdleTimeoutCutsAClientThatStopsReading(t *testing.T) {
	backend := endless(t)
	var l loopback
	o := l.options()
	o.Limits = Limits{StreamIdleTimeout: 300 * time.Millisecond}
	p := New(o)
	t.Cleanup(p.Close)
	m := NewMetrics(prometheus.NewRegistry(), p)
	if err := p.Apply(&Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{{
		Route: "ns/big", Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: backend, Weight: 1}},
	}}}}}}}); err != nil {
		t.Fatal(err)
	}
	addr := l.at(t, "tcp/80")
	served := func() float64 { return testutil.ToFloat64(m.requests.WithLabelValues("HTTP/80", "ns/big", "200")) }

	t.Run("HTTP/1.1", func(t *testing.T) {
		before := served()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d, want 200", resp.StatusCode)
		}
		// Nothing more is read from here on.
		poll.Until(t, 20*time.Second, "the stalled request's handler returned", func() bool { return served() == before+1 })
		poll.Until(t, 20*time.Second, "the stalled connection closed", func() bool { return p.conns.count() == 0 })
	})

	t.Run("HTTP/2", func(t *testing.T) {
		before := served()
		var protocols http.Protocols
		protocols.SetUnencryptedHTTP2(true)
		client := &http.Client{Transport: &http.Transport{Protocols: &protocols}, Timeout: 20 * time.Second}
		defer client.CloseIdleConnections()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("answered over %s, want HTTP/2", resp.Proto)
		}
		poll.Until(t, 20*time.Second, "the stalled stream's handler returned", func() bool { return served() == before+1 })
		// The connection serves another stream; the stalled one reads
		// to its end, not to 64 MiB.
		if code := getWith(t, client, "http://"+addr+"/small"); code != http.StatusOK {
			t.Fatalf("status %d on the same connection, want 200", code)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil || n >= 64<<20 {
			t.Fatalf("the stalled stream read %d bytes (%v), want it cut short", n, err)
		}
	})
}

func getWith(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	// Only the head: the backend's answer is long.
	resp.Body.Close()
	return resp.StatusCode
}
