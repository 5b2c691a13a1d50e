package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/poll"
	"github.com/outrigger-ccm/outrigger/internal/testcert"
)

// tlsBackend is a backend that terminates TLS itself (a TLSRoute's
// Passthrough backend): once its handshake is done it sends its name and
// the server name it was asked for, then echoes. accepted counts the
// connections it was given.
func tlsBackend(t *testing.T, name string, accepted *atomic.Int64) string {
	t.Helper()
	certPEM, keyPEM := testcert.SelfSigned(t, name)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			if accepted != nil {
				accepted.Add(1)
			}
			go func() {
				c := tls.Server(raw, &tls.Config{Certificates: []tls.Certificate{cert}})
				defer c.Close()
				if err := c.Handshake(); err != nil {
					return
				}
				_, _ = io.WriteString(c, name+" "+c.ConnectionState().ServerName+"\n")
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// countingEcho is tcpEcho counting the connections it was given.
func countingEcho(t *testing.T, accepted *atomic.Int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// greeting dials addr over TLS naming serverName and returns the first line
// the far end (the backend through the proxy) sends, and the certificate
// the handshake was made with.
func greeting(t *testing.T, addr, serverName string) (string, *tls.Conn, error) {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: serverName}) //nolint:gosec // the tests' own certificates
	if err != nil {
		return "", nil, err
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), c, err
}

// A Passthrough port sends each connection, its ClientHello untouched, to
// the route of its server name: the exact name first, then the longest
// wildcard, then the route for any name; the backend terminates TLS and
// sees the name the client asked for.
func TestTLSPassthroughRoutesByServerName(t *testing.T) {
	exact, wild, wilder, anyName := tlsBackend(t, "exact", nil), tlsBackend(t, "wild", nil), tlsBackend(t, "wilder", nil), tlsBackend(t, "any", nil)
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(&Config{Ports: []Port{{Port: 443, Protocol: TLS, TLSHosts: []TLSHost{
		{Hostname: "*.example.com", Route: "ns/wild", Backends: []Backend{{Address: wild, Weight: 1}}},
		{Hostname: "a.example.com", Route: "ns/exact", Backends: []Backend{{Address: exact, Weight: 1}}},
		{Hostname: "*.b.example.com", Route: "ns/wilder", Backends: []Backend{{Address: wilder, Weight: 1}}},
		{Route: "ns/any", Backends: []Backend{{Address: anyName, Weight: 1}}},
	}}}}); err != nil {
		t.Fatal(err)
	}
	addr := l.at(t, "tcp/443")
	for name, want := range map[string]string{
		"a.example.com":   "exact a.example.com",
		"A.Example.com":   "exact a.example.com",
		"x.example.com":   "wild x.example.com",
		"x.y.example.com": "wild x.y.example.com",
		"x.b.example.com": "wilder x.b.example.com",
		"example.com":     "any example.com",
		"other.org":       "any other.org",
	} {
		got, _, err := greeting(t, addr, name)
		if err != nil || !strings.EqualFold(got, want) {
			t.Errorf("server name %q: %q, %v; want %q", name, got, err, want)
		}
	}
}

// Without a route for its server name (nor one for any name), or with only
// invalid backends, a connection is closed: no handshake completes.
func TestTLSPassthroughRefusesUnroutedNames(t *testing.T) {
	var accepted atomic.Int64
	backend := tlsBackend(t, "a", &accepted)
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(&Config{Ports: []Port{{Port: 443, Protocol: TLS, TLSHosts: []TLSHost{
		{Hostname: "a.example.com", Route: "ns/a", Backends: []Backend{{Address: backend, Weight: 1}}},
		{Hostname: "invalid.example.com", Route: "ns/invalid", Backends: []Backend{{Weight: 1, Invalid: true}}},
	}}}}); err != nil {
		t.Fatal(err)
	}
	addr := l.at(t, "tcp/443")
	for _, name := range []string{"other.example.com", "invalid.example.com", ""} {
		if got, _, err := greeting(t, addr, name); err == nil {
			t.Errorf("server name %q reached %q", name, got)
		}
	}
	if got, _, err := greeting(t, addr, "a.example.com"); err != nil || got != "a a.example.com" {
		t.Fatalf("the routed name: %q, %v", got, err)
	}
	if n := accepted.Load(); n != 1 {
		t.Errorf("the backend was given %d connections, want only the routed one", n)
	}
}

// A Terminate host ends TLS at the proxy with the port's certificate for
// the server name and sends the backend the plaintext; a Passthrough host
// of the same port still reaches its own TLS backend.
func TestTLSTerminateAndPassthroughOnOnePort(t *testing.T) {
	plain := tcpEcho(t)
	passthrough := tlsBackend(t, "passthrough", nil)
	certPEM, keyPEM := testcert.SelfSigned(t, "t.example.com")
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(&Config{Ports: []Port{{Port: 443, Protocol: TLS,
		Certificates: []Certificate{{Hostname: "t.example.com", CertPEM: certPEM, KeyPEM: keyPEM}},
		TLSHosts: []TLSHost{
			{Hostname: "t.example.com", Route: "ns/t", Terminate: true, Backends: []Backend{{Address: plain, Weight: 1}}},
			{Hostname: "p.example.com", Route: "ns/p", Backends: []Backend{{Address: passthrough, Weight: 1}}},
		},
	}}}); err != nil {
		t.Fatal(err)
	}
	addr := l.at(t, "tcp/443")

	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: "t.example.com"}) //nolint:gosec // the test's own certificate
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	want, _ := tls.X509KeyPair(certPEM, keyPEM)
	if peer := c.ConnectionState().PeerCertificates; len(peer) == 0 || !bytes.Equal(peer[0].Raw, want.Certificate[0]) {
		t.Errorf("the terminated handshake was not made with the port's certificate")
	}
	if _, err := io.WriteString(c, "plain ping"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("plain ping"))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "plain ping" {
		t.Fatalf("through the terminated route: %q, %v", buf, err)
	}

	if got, _, err := greeting(t, addr, "p.example.com"); err != nil || got != "passthrough p.example.com" {
		t.Errorf("the passthrough host of the same port: %q, %v", got, err)
	}
	// A name without a certificate nor a route: refused.
	if _, _, err := greeting(t, addr, "x.example.com"); err == nil {
		t.Error("a name no host serves was answered")
	}
}

// A port terminating TLS without a certificate is refused as a whole.
func TestTLSTerminateNeedsACertificate(t *testing.T) {
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	err := p.Apply(&Config{Ports: []Port{{Port: 443, Protocol: TLS, TLSHosts: []TLSHost{
		{Hostname: "t.example.com", Route: "ns/t", Terminate: true, Backends: []Backend{{Address: "127.0.0.1:1", Weight: 1}}},
	}}}})
	if err == nil {
		t.Fatal("a terminated TLS port without a certificate was applied")
	}
	err = p.Apply(&Config{Ports: []Port{{Port: 443, Protocol: TLS, TLSHosts: []TLSHost{
		{Hostname: "t.example.com", Route: "ns/a"}, {Hostname: "T.example.com", Route: "ns/b"},
	}}}})
	if err == nil {
		t.Fatal("a TLS port listing one host twice was applied")
	}
}

// closedWithin says whether the far end closes c within d (what it sends
// first is read and dropped).
func closedWithin(c net.Conn, d time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return err
	}
	return nil
}

// What a client sends before its route is known is bounded: garbage, a
// ClientHello cut short (then silence), and a handshake message larger
// than allowed each end with the connection closed, soon, and no backend
// ever reached.
func TestTLSHostileHellos(t *testing.T) {
	var accepted atomic.Int64
	backend := countingEcho(t, &accepted)
	var l loopback
	o := l.options()
	o.Limits.RequestHeaderTimeout = 300 * time.Millisecond
	p := New(o)
	t.Cleanup(p.Close)
	if err := p.Apply(&Config{Ports: []Port{{Port: 443, Protocol: TLS, TLSHosts: []TLSHost{
		{Route: "ns/any", Backends: []Backend{{Address: backend, Weight: 1}}},
	}}}}); err != nil {
		t.Fatal(err)
	}
	addr := l.at(t, "tcp/443")
	hello := clientHello(t)

	// oversized: a handshake record announcing a 16 MiB ClientHello, then
	// full records of it for as long as the proxy reads.
	oversized := func(c net.Conn) {
		first := []byte{22, 3, 1, 0x40, 0x00, 1, 0xff, 0xff, 0xff}
		first = append(first, make([]byte, 0x4000-4)...)
		if _, err := c.Write(first); err != nil {
			return
		}
		record := append([]byte{22, 3, 1, 0x40, 0x00}, make([]byte, 0x4000)...)
		for range 64 {
			if _, err := c.Write(record); err != nil {
				return
			}
		}
	}
	for name, send := range map[string]func(net.Conn){
		"garbage":            func(c net.Conn) { _, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")) },
		"binary garbage":     func(c net.Conn) { _, _ = c.Write(bytes.Repeat([]byte{0x16, 0xff}, 4096)) },
		"truncated hello":    func(c net.Conn) { _, _ = c.Write(hello[:len(hello)/2]) },
		"only a header":      func(c net.Conn) { _, _ = c.Write(hello[:5]) },
		"nothing at all":     func(net.Conn) {},
		"oversized hello":    oversized,
		"zero-length record": func(c net.Conn) { _, _ = c.Write([]byte{22, 3, 1, 0, 0}) },
	} {
		t.Run(name, func(t *testing.T) {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			go send(c)
			start := time.Now()
			if err := closedWithin(c, 5*time.Second); err != nil {
				t.Fatalf("still open after %v: %v", time.Since(start), err)
			}
		})
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("hostile hellos reached the backend %d times", n)
	}
	// And the port still serves a well-formed client.
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: "x.example.com"}) //nolint:gosec // no certificate is checked: the echo backend speaks no TLS
	if err == nil {
		c.Close()
	}
	if accepted.Load() != 1 {
		t.Errorf("a well-formed ClientHello was not forwarded (%d connections at the backend)", accepted.Load())
	}
}

// clientHello is a real client's first flight: what crypto/tls sends.
func clientHello(t testing.TB) []byte {
	t.Helper()
	client, server := net.Pipe()
	go func() {
		c := tls.Client(client, &tls.Config{ServerName: "a.example.com", InsecureSkipVerify: true}) //nolint:gosec // never completes
		_ = c.Handshake()
	}()
	defer client.Close()
	defer server.Close()
	_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
	header := make([]byte, 5)
	if _, err := io.ReadFull(server, header); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint16(header[3:]))
	if _, err := io.ReadFull(server, body); err != nil {
		t.Fatal(err)
	}
	return append(header, body...)
}

// readServerName reads no more than maxHelloBytes, whatever the client
// sends, and gives back every byte it read with the name.
func TestReadServerNameIsBounded(t *testing.T) {
	hello := clientHello(t)
	client, server := net.Pipe()
	go func() { _, _ = client.Write(hello) }()
	name, head, err := readServerName(t.Context(), server)
	if err != nil || name != "a.example.com" || !bytes.Equal(head, hello) {
		t.Fatalf("a real ClientHello: %q, %d bytes of %d, %v", name, len(head), len(hello), err)
	}
	client.Close()
	server.Close()

	client, server = net.Pipe()
	defer client.Close()
	defer server.Close()
	counted := &countingConn{Conn: server}
	go func() {
		// Records of handshake bytes, endlessly, announcing a message
		// just under crypto/tls's own bound (64 KiB): the records'
		// headers take it over maxHelloBytes.
		first := append([]byte{22, 3, 1, 0x40, 0x00, 1, 0x00, 0xff, 0xf0}, make([]byte, 0x4000-4)...)
		if _, err := client.Write(first); err != nil {
			return
		}
		record := append([]byte{22, 3, 1, 0x40, 0x00}, make([]byte, 0x4000)...)
		for {
			if _, err := client.Write(record); err != nil {
				return
			}
		}
	}()
	if _, _, err := readServerName(t.Context(), counted); err == nil {
		t.Fatal("an endless ClientHello was read to its end")
	}
	if n := counted.n.Load(); n > maxHelloBytes {
		t.Errorf("read %d bytes of an endless ClientHello, want at most %d", n, maxHelloBytes)
	}
}

type countingConn struct {
	net.Conn
	n atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// Removing a TLSRoute's host, or the backend it was spliced to, ends the
// connections it carries, as for TCP routes; a host that stays keeps its
// own.
func TestTLSRevocation(t *testing.T) {
	a, b := tlsBackend(t, "a", nil), tlsBackend(t, "b", nil)
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	hostA := TLSHost{Hostname: "a.example.com", Route: "ns/a", Backends: []Backend{{Address: a, Weight: 1}}}
	hostB := TLSHost{Hostname: "b.example.com", Route: "ns/b", Backends: []Backend{{Address: b, Weight: 1}}}
	if err := p.Apply(&Config{Ports: []Port{{Port: 443, Protocol: TLS, TLSHosts: []TLSHost{hostA, hostB}}}}); err != nil {
		t.Fatal(err)
	}
	addr := l.at(t, "tcp/443")
	_, ca, err := greeting(t, addr, "a.example.com")
	if err != nil {
		t.Fatal(err)
	}
	_, cb, err := greeting(t, addr, "b.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Apply(&Config{Ports: []Port{{Port: 443, Protocol: TLS, TLSHosts: []TLSHost{hostA}}}}); err != nil {
		t.Fatal(err)
	}
	if err := closedWithin(cb, 5*time.Second); err != nil {
		t.Errorf("the removed route's connection is still open: %v", err)
	}
	// The kept route's connection still echoes.
	_ = ca.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(ca, "still\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(ca)
	if line, err := r.ReadString('\n'); err != nil || line != "still\n" {
		t.Errorf("the kept route's connection: %q, %v", line, err)
	}
}

// A flood of connections that never send their ClientHello makes room for
// the next client under the connection limit, as idle HTTP connections do:
// a TLS connection is in use only once its route is chosen.
func TestTLSSilentFloodEvictsTheSilentNotTheNextClient(t *testing.T) {
	backend := tlsBackend(t, "a", nil)
	var l loopback
	o := l.options()
	o.Limits.MaxConnections = 20
	p := New(o)
	t.Cleanup(p.Close)
	if err := p.Apply(&Config{Ports: []Port{{Port: 443, Protocol: TLS, TLSHosts: []TLSHost{
		{Route: "ns/any", Backends: []Backend{{Address: backend, Weight: 1}}},
	}}}}); err != nil {
		t.Fatal(err)
	}
	addr := l.at(t, "tcp/443")
	var silent []net.Conn
	t.Cleanup(func() {
		for _, c := range silent {
			c.Close()
		}
	})
	for range 100 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	poll.Until(t, 20*time.Second, "80 silent connections evicted", func() bool { return p.conns.evicted.Load() >= 80 })
	if n := p.conns.count(); n > 20 {
		t.Fatalf("%d connections held, limit 20", n)
	}
	for range 5 {
		if got, _, err := greeting(t, addr, "a.example.com"); err != nil || got != "a a.example.com" {
			t.Fatalf("a good client: %q, %v", got, err)
		}
	}
}

// FuzzReadServerName: whatever a client sends first, readServerName ends
// (no panic, no read past its bound) and, when it finds a name, gives
// back the bytes it read as a prefix of what was sent.
func FuzzReadServerName(f *testing.F) {
	f.Add(clientHello(f))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{22, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Add([]byte{22, 3, 3, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, sent []byte) {
		client, server := net.Pipe()
		defer server.Close()
		go func() {
			_, _ = client.Write(sent)
			client.Close()
		}()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, head, err := readServerName(ctx, server)
		if err != nil {
			return
		}
		if len(head) > maxHelloBytes || !bytes.HasPrefix(sent, head) {
			t.Fatalf("gave back %d bytes that are not a prefix of the %d sent", len(head), len(sent))
		}
	})
}
