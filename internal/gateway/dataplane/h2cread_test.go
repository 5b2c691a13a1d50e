package dataplane

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// readCounter counts the reads the data plane makes on the connections it
// accepts: each is a system call.
type readCounter struct {
	net.Listener
	reads *atomic.Int64
}

func (l readCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countedConn{Conn: c, reads: l.reads}, nil
}

type countedConn struct {
	net.Conn
	reads *atomic.Int64
}

func (c countedConn) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.Conn.Read(p)
}

// An h2c client's requests come to the data plane in one read each, or
// fewer when they come together, not one read for each frame's header and
// another for the frame; every answer is still right, and the port still
// answers HTTP/1.1 (TestH2CConnBuffersOnlyHTTP2: without a buffer).
func TestH2CFramesReadInBulk(t *testing.T) {
	backend := echo(t, "b")
	var reads atomic.Int64
	var l loopback
	o := l.options()
	listen := o.ListenTCP
	o.ListenTCP = func(port int32) (net.Listener, error) {
		ln, err := listen(port)
		if err != nil {
			return nil, err
		}
		return readCounter{Listener: ln, reads: &reads}, nil
	}
	p := New(o)
	t.Cleanup(p.Close)
	if err := p.Apply(&Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{{
		Route: "ns/r", Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: backend, Weight: 1}},
	}}}}}}}); err != nil {
		t.Fatal(err)
	}
	addr := l.at(t, "tcp/80")

	const requests = 200
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &protocols}, Timeout: 20 * time.Second}
	defer client.CloseIdleConnections()
	get := func(i int) error {
		resp, err := client.Get(fmt.Sprintf("http://%s/path/%d", addr, i))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK || resp.Header.Get("X-Seen-Path") != fmt.Sprintf("/path/%d", i) {
			return fmt.Errorf("request %d: %s %d, backend saw %q", i, resp.Proto, resp.StatusCode, resp.Header.Get("X-Seen-Path"))
		}
		return nil
	}
	// One request opens the connection (its preface and settings), then
	// the rest go on it, a few at a time.
	if err := get(0); err != nil {
		t.Fatal(err)
	}
	before := reads.Load()
	var wg sync.WaitGroup
	errs := make(chan error, requests)
	for w := range 4 {
		wg.Go(func() {
			for i := w + 1; i <= requests; i += 4 {
				if err := get(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// A HEADERS frame each; unbuffered, that was 2 reads a request.
	if n := reads.Load() - before; n > requests*5/4 {
		t.Errorf("%d requests over h2c took %d reads, want at most %d", requests, n, requests*5/4)
	}

	// HTTP/1.1 on the same port.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /one HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	if n, err := c.Read(buf); err != nil || n == 0 {
		t.Fatalf("no HTTP/1.1 answer: %v", err)
	}
}

// The preface decides: an HTTP/1.1 request gets no buffer, an h2c client
// one, and every byte reaches the reader in order either way.
func TestH2CConnBuffersOnlyHTTP2(t *testing.T) {
	for _, tc := range []struct {
		name, first string
		buffered    bool
	}{
		{"HTTP/1.1", "GET / HTTP/1.1\r\n", false},
		{"PUT, which begins as the preface does not", "PUT / HTTP/1.1\r\n", false},
		{"h2c preface, read as net/http peeks at it", h2cPreface[:14], true},
		{"h2c preface, whole", h2cPreface, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			c := &h2cConn{Conn: server}
			rest := "and then the frames, in pieces"
			go func() {
				_, _ = io.WriteString(client, tc.first)
				_, _ = io.WriteString(client, rest)
				client.Close()
			}()
			first := make([]byte, len(tc.first))
			if _, err := io.ReadFull(c, first); err != nil {
				t.Fatal(err)
			}
			if (c.br != nil) != tc.buffered {
				t.Errorf("buffered: %v, want %v", c.br != nil, tc.buffered)
			}
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if string(first)+string(got) != tc.first+rest {
				t.Errorf("read %q, want %q", string(first)+string(got), tc.first+rest)
			}
			if c.NetConn() != server {
				t.Error("NetConn is not the connection below")
			}
		})
	}
}
