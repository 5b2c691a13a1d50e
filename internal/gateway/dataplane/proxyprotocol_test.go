package dataplane

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/testcert"
)

// v2Header is a version 2 header as a load balancer sends it: PROXY (or
// LOCAL) over TCP, the family the addresses are of, and tlvs after them.
// The tests' own encoder, written from the specification apart from the
// parser, so that each checks the other.
func v2Header(src, dst netip.AddrPort, local bool, tlvs []byte) []byte {
	b := append([]byte(nil), v2Signature...)
	cmd := byte(0x21)
	if local {
		cmd = 0x20
	}
	var addrs []byte
	fam := byte(0x11)
	if src.Addr().Is4() {
		addrs = append(addrs, src.Addr().AsSlice()...)
		addrs = append(addrs, dst.Addr().AsSlice()...)
	} else {
		fam = 0x21
		a, d := src.Addr().As16(), dst.Addr().As16()
		addrs = append(append(addrs, a[:]...), d[:]...)
	}
	addrs = binary.BigEndian.AppendUint16(addrs, src.Port())
	addrs = binary.BigEndian.AppendUint16(addrs, dst.Port())
	addrs = append(addrs, tlvs...)
	b = append(b, cmd, fam)
	b = binary.BigEndian.AppendUint16(b, uint16(len(addrs)))
	return append(b, addrs...)
}

func parseAll(data []byte) (proxyHeader, []byte, error) {
	r := bufio.NewReaderSize(bytes.NewReader(data), 512)
	h, err := readProxyHeader(r)
	rest, _ := io.ReadAll(r)
	return h, rest, err
}

// Every form a load balancer sends is read, and what follows the header
// is left for the connection's user, byte for byte.
func TestProxyHeadersAreRead(t *testing.T) {
	src4, dst4 := netip.MustParseAddrPort("127.0.0.9:51000"), netip.MustParseAddrPort("127.0.0.1:80")
	src6, dst6 := netip.MustParseAddrPort("[::1]:51000"), netip.MustParseAddrPort("[::1]:443")
	for _, tc := range []struct {
		name     string
		header   []byte
		src, dst netip.AddrPort
		local    bool
	}{
		{name: "v1 TCP4", header: []byte("PROXY TCP4 127.0.0.9 127.0.0.1 51000 80\r\n"), src: src4, dst: dst4},
		{name: "v1 TCP6", header: []byte("PROXY TCP6 ::1 ::1 51000 443\r\n"), src: src6, dst: dst6},
		{name: "v1 UNKNOWN, with the rest ignored", header: []byte("PROXY UNKNOWN ffff::1 whatever\r\n"), local: true},
		{name: "v1 UNKNOWN, bare", header: []byte("PROXY UNKNOWN\r\n"), local: true},
		{name: "v1 of the longest length", header: []byte("PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"),
			src: netip.MustParseAddrPort("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"), dst: netip.MustParseAddrPort("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535")},
		{name: "v2 INET", header: v2Header(src4, dst4, false, nil), src: src4, dst: dst4},
		{name: "v2 INET6", header: v2Header(src6, dst6, false, nil), src: src6, dst: dst6},
		{name: "v2 with TLVs skipped", header: v2Header(src4, dst4, false, []byte{0x05, 0x00, 0x03, 'a', 'b', 'c', 0x04, 0x00, 0x00}), src: src4, dst: dst4},
		{name: "v2 with the most TLV bytes allowed", header: v2Header(src4, dst4, false, make([]byte, maxV2TLVBytes)), src: src4, dst: dst4},
		{name: "v2 LOCAL, a health check", header: v2Header(src4, dst4, true, nil), local: true},
		{name: "v2 LOCAL without addresses", header: append(append([]byte(nil), v2Signature...), 0x20, 0x00, 0, 0), local: true},
		{name: "v2 PROXY of family UNSPEC", header: append(append([]byte(nil), v2Signature...), 0x21, 0x00, 0, 0), local: true},
		{name: "v2 PROXY of family UNIX", header: append(append(append([]byte(nil), v2Signature...), 0x21, 0x31, 0, 216), make([]byte, 216)...), local: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			payload := []byte("GET / HTTP/1.1\r\n\r\n")
			h, rest, err := parseAll(append(append([]byte(nil), tc.header...), payload...))
			if err != nil {
				t.Fatal(err)
			}
			if h.local != tc.local || h.src != tc.src || h.dst != tc.dst {
				t.Errorf("read %+v, want src %v dst %v local %v", h, tc.src, tc.dst, tc.local)
			}
			if !bytes.Equal(rest, payload) {
				t.Errorf("left %q for the connection, want %q", rest, payload)
			}
		})
	}
}

// What a client could send instead of a header is refused: anything
// malformed, ambiguous, out of range, cut short or larger than allowed.
func TestHostileProxyHeadersAreRefused(t *testing.T) {
	src4, dst4 := netip.MustParseAddrPort("127.0.0.9:51000"), netip.MustParseAddrPort("127.0.0.1:80")
	good := v2Header(src4, dst4, false, nil)
	with := func(i int, b byte) []byte {
		h := append([]byte(nil), good...)
		h[i] = b
		return h
	}
	for _, tc := range []struct {
		name   string
		header []byte
	}{
		{name: "an HTTP request", header: []byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n")},
		{name: "nothing at all", header: nil},
		{name: "v1 without CRLF within 107 bytes", header: []byte("PROXY TCP4 127.0.0.9 127.0.0.1 51000 80" + strings.Repeat(" ", 100) + "\r\n")},
		{name: "v1 with LF alone", header: []byte("PROXY TCP4 127.0.0.9 127.0.0.1 51000 80\n")},
		{name: "v1 cut short", header: []byte("PROXY TCP4 127.0.0.9 127.0")},
		{name: "v1 with two spaces", header: []byte("PROXY TCP4  127.0.0.9 127.0.0.1 51000 80\r\n")},
		{name: "v1 TCP4 with IPv6 addresses", header: []byte("PROXY TCP4 ::1 ::1 51000 80\r\n")},
		{name: "v1 TCP6 with IPv4 addresses", header: []byte("PROXY TCP6 127.0.0.9 127.0.0.1 51000 80\r\n")},
		{name: "v1 TCP6 with a zone", header: []byte("PROXY TCP6 fe80::1%lo ::1 51000 80\r\n")},
		{name: "v1 UDP4", header: []byte("PROXY UDP4 127.0.0.9 127.0.0.1 51000 80\r\n")},
		{name: "v1 port out of range", header: []byte("PROXY TCP4 127.0.0.9 127.0.0.1 65536 80\r\n")},
		{name: "v1 port with a sign", header: []byte("PROXY TCP4 127.0.0.9 127.0.0.1 +51 80\r\n")},
		{name: "v1 port with a leading zero", header: []byte("PROXY TCP4 127.0.0.9 127.0.0.1 051000 80\r\n")},
		{name: "v1 address with leading zeros", header: []byte("PROXY TCP4 127.0.0.09 127.0.0.1 51000 80\r\n")},
		{name: "v1 missing a field", header: []byte("PROXY TCP4 127.0.0.9 127.0.0.1 51000\r\n")},
		{name: "v1 lower case", header: []byte("proxy TCP4 127.0.0.9 127.0.0.1 51000 80\r\n")},
		{name: "v2 signature alone", header: append([]byte(nil), v2Signature...)},
		{name: "v2 version 1", header: with(12, 0x11)},
		{name: "v2 command 2", header: with(12, 0x22)},
		{name: "v2 family 4", header: with(13, 0x41)},
		{name: "v2 transport 3", header: with(13, 0x13)},
		{name: "v2 INET over datagrams", header: with(13, 0x12)},
		{name: "v2 INET of unspecified transport", header: with(13, 0x10)},
		{name: "v2 length shorter than its addresses", header: with(15, 8)},
		{name: "v2 addresses cut short", header: good[:len(good)-3]},
		{name: "v2 TLVs one byte beyond the bound", header: v2Header(src4, dst4, false, make([]byte, maxV2TLVBytes+1))},
		{name: "v2 length of 64 KiB", header: append(with(14, 0xff), make([]byte, 64)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if h, _, err := parseAll(tc.header); !errors.Is(err, errProxyHeader) {
				t.Errorf("read %+v, err %v; want it refused", h, err)
			}
		})
	}
}

// FuzzProxyProtocol: whatever arrives, the reader neither panics nor
// reads past the header's bounds, and a header it accepts names a client
// that, sent again in version 2, reads back the same.
func FuzzProxyProtocol(f *testing.F) {
	src4, dst4 := netip.MustParseAddrPort("127.0.0.9:51000"), netip.MustParseAddrPort("127.0.0.1:80")
	f.Add([]byte("PROXY TCP4 127.0.0.9 127.0.0.1 51000 80\r\nGET /"))
	f.Add([]byte("PROXY TCP6 ::1 ::1 1 2\r\n"))
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add(v2Header(src4, dst4, false, []byte{1, 0, 1, 'h'}))
	f.Add(v2Header(netip.MustParseAddrPort("[::1]:5"), netip.MustParseAddrPort("[::1]:6"), false, nil))
	f.Add(v2Header(src4, dst4, true, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bytes.NewReader(data)
		r := bufio.NewReaderSize(br, 512)
		h, err := readProxyHeader(r)
		if err != nil {
			if !errors.Is(err, errProxyHeader) {
				t.Fatalf("error %v is not a header's refusal", err)
			}
			return
		}
		consumed := len(data) - r.Buffered() - br.Len()
		if consumed > v2HeaderLen+216+maxV2TLVBytes {
			t.Fatalf("read %d bytes for a header", consumed)
		}
		if bytes.HasPrefix(data, []byte("PROXY ")) && consumed > maxV1Header {
			t.Fatalf("read %d bytes for a version 1 header", consumed)
		}
		if h.local {
			return
		}
		if !h.src.Addr().IsValid() || !h.dst.Addr().IsValid() {
			t.Fatalf("accepted %+v without addresses", h)
		}
		again, rest, err := parseAll(append(v2Header(h.src, h.dst, false, nil), 'x'))
		if err != nil || again != h || string(rest) != "x" {
			t.Fatalf("%+v sent again read %+v, %q, %v", h, again, rest, err)
		}
	})
}

// seenWithin is the next header the backend saw, failing the test when
// none comes within 10 s (a request that never reached the backend).
func seenWithin(t *testing.T, seen <-chan http.Header) http.Header {
	t.Helper()
	select {
	case h := <-seen:
		return h
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the backend within 10 s")
		return nil
	}
}

// proxyRelay stands for a cloud's load balancer that speaks the PROXY
// protocol: it accepts on a loopback address of its own and relays each
// connection to target, first sending a version 2 header naming the
// client as it saw it.
func proxyRelay(t *testing.T, target string) string {
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
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				from := c.RemoteAddr().(*net.TCPAddr).AddrPort()
				to := c.LocalAddr().(*net.TCPAddr).AddrPort()
				if _, err := up.Write(v2Header(from, to, false, nil)); err != nil {
					return
				}
				done := make(chan struct{})
				go func() { _, _ = io.Copy(c, up); c.Close(); close(done) }()
				_, _ = io.Copy(up, c)
				up.Close()
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

// clientFrom is an HTTP client whose connections come from a loopback
// address of its own, as a distinct client on the internet would.
func clientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func proxyProtocolGateway(t *testing.T, on bool, backend string) (*Proxy, *loopback) {
	t.Helper()
	lb := &loopback{}
	o := lb.options()
	o.Limits = Limits{RequestHeaderTimeout: 500 * time.Millisecond}
	p := New(o)
	t.Cleanup(p.Close)
	rule := Rule{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: backend, Weight: 1}}}
	if err := p.Apply(&Config{Settings: &Settings{ProxyProtocol: on}, Ports: []Port{
		{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{rule}}}},
		{Port: 9000, Protocol: TCP, Backends: []Backend{{Address: tcpEcho(t), Weight: 1}}},
	}}); err != nil {
		t.Fatal(err)
	}
	return p, lb
}

// Behind a load balancer that sends the PROXY protocol, the backend
// learns the client's address (the client's own loopback address, not
// the relay's) in X-Forwarded-For and X-Real-IP; a TCP route's backend
// receives the client's bytes without the header.
func TestProxyProtocolClientAddressReachesTheBackend(t *testing.T) {
	seen := make(chan http.Header, 1)
	_, lb := proxyProtocolGateway(t, true, headerRecorder(t, seen))
	relay := proxyRelay(t, lb.at(t, "tcp/80"))
	resp, err := clientFrom(t, "127.0.0.77").Get("http://" + relay + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h := seenWithin(t, seen)
	if got := h.Get("X-Forwarded-For"); got != "127.0.0.77" {
		t.Errorf("X-Forwarded-For %q, want the client's 127.0.0.77", got)
	}
	if got := h.Get("X-Real-Ip"); got != "127.0.0.77" {
		t.Errorf("X-Real-IP %q, want the client's 127.0.0.77", got)
	}

	c, err := net.Dial("tcp", proxyRelay(t, lb.at(t, "tcp/9000")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
		t.Fatalf("the TCP backend echoed %q, %v; want \"ping\" alone", got, err)
	}
}

// A load balancer's health check (version 2 LOCAL) is served with the
// connection's own address.
func TestProxyProtocolLocalKeepsTheConnectionsAddress(t *testing.T) {
	seen := make(chan http.Header, 1)
	_, lb := proxyProtocolGateway(t, true, headerRecorder(t, seen))
	c, err := net.Dial("tcp", lb.at(t, "tcp/80"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hdr := v2Header(netip.MustParseAddrPort("127.0.0.99:1"), netip.MustParseAddrPort("127.0.0.1:80"), true, nil)
	if _, err := c.Write(append(hdr, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"...)); err != nil {
		t.Fatal(err)
	}
	h := seenWithin(t, seen)
	if got := h.Get("X-Real-Ip"); got != "127.0.0.1" {
		t.Errorf("X-Real-IP %q, want the connection's own 127.0.0.1", got)
	}
}

// With the setting on, a connection without a valid header is closed,
// soon, on HTTP and TCP ports alike, and a silent one does not hold up the
// next client: the header is read in each connection's own goroutine.
func TestProxyProtocolRefusesConnectionsWithoutAHeader(t *testing.T) {
	seen := make(chan http.Header, 10)
	_, lb := proxyProtocolGateway(t, true, headerRecorder(t, seen))
	silent, err := net.Dial("tcp", lb.at(t, "tcp/80"))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if _, err := http.Get("http://" + lb.at(t, "tcp/80") + "/"); err == nil {
		t.Error("a request without a PROXY header was answered")
	}
	resp, err := clientFrom(t, "127.0.0.78").Get("http://" + proxyRelay(t, lb.at(t, "tcp/80")) + "/")
	if err != nil {
		t.Fatalf("a client behind the load balancer, after a silent connection: %v", err)
	}
	resp.Body.Close()
	if err := closedWithin(silent, 5*time.Second); err != nil {
		t.Errorf("a connection that sent nothing was still open after 5 s (header timeout 500 ms): %v", err)
	}
	for _, port := range []string{"tcp/80", "tcp/9000"} {
		c, err := net.Dial("tcp", lb.at(t, port))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "PROXY TCP4 127.0.0.9 127.0.0.1 51000\r\nping")
		if err := closedWithin(c, 5*time.Second); err != nil {
			t.Errorf("%s: a connection with a malformed header was still open after 5 s: %v", port, err)
		}
		c.Close()
	}
}

// Without the setting, a PROXY header is not read: it is a client's
// claim like any other, and the request is refused as malformed rather
// than believed. Turning the setting on applies to the connections
// after it.
func TestProxyProtocolIsReadOnlyWhenSet(t *testing.T) {
	seen := make(chan http.Header, 1)
	backend := headerRecorder(t, seen)
	p, lb := proxyProtocolGateway(t, false, backend)
	c, err := net.Dial("tcp", lb.at(t, "tcp/80"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "PROXY TCP4 127.0.0.66 127.0.0.1 51000 80\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n")
	line, _ := bufio.NewReader(c).ReadString('\n')
	if !strings.Contains(line, " 400 ") {
		t.Errorf("a claimed PROXY header without the setting was answered %q, want 400", line)
	}

	rule := Rule{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: backend, Weight: 1}}}
	if err := p.Apply(&Config{Settings: &Settings{ProxyProtocol: true}, Ports: []Port{
		{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{rule}}}},
	}}); err != nil {
		t.Fatal(err)
	}
	resp, err := clientFrom(t, "127.0.0.79").Get("http://" + proxyRelay(t, lb.at(t, "tcp/80")) + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := seenWithin(t, seen).Get("X-Real-Ip"); got != "127.0.0.79" {
		t.Errorf("after the setting was turned on, X-Real-IP %q, want 127.0.0.79", got)
	}
}

// The header comes before TLS too: an HTTPS port's backend learns the
// client behind the load balancer (and that it came over https), and a TLS
// Passthrough port routes by the ClientHello that follows the header.
func TestProxyProtocolBeforeTLS(t *testing.T) {
	seen := make(chan http.Header, 1)
	backend := headerRecorder(t, seen)
	certPEM, keyPEM := testcert.SelfSigned(t, "example.com")
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(&Config{Settings: &Settings{ProxyProtocol: true}, Ports: []Port{
		{Port: 443, Protocol: HTTPS,
			Certificates: []Certificate{{Hostname: "example.com", CertPEM: certPEM, KeyPEM: keyPEM}},
			Hosts:        []VirtualHost{{Rules: []Rule{{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: backend, Weight: 1}}}}}}},
		{Port: 8443, Protocol: TLS, TLSHosts: []TLSHost{{Route: "ns/any", Backends: []Backend{{Address: tlsBackend(t, "passed", nil), Weight: 1}}}}},
	}}); err != nil {
		t.Fatal(err)
	}
	client := clientFrom(t, "127.0.0.80")
	client.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true, ServerName: "example.com"} //nolint:gosec // the test's own certificate
	resp, err := client.Get("https://" + proxyRelay(t, l.at(t, "tcp/443")) + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h := seenWithin(t, seen)
	if got := h.Get("X-Real-Ip"); got != "127.0.0.80" {
		t.Errorf("HTTPS: X-Real-IP %q, want the client's 127.0.0.80", got)
	}
	if got := h.Get("X-Forwarded-Proto"); got != "https" {
		t.Errorf("HTTPS: X-Forwarded-Proto %q, want https", got)
	}
	if got, _, err := greeting(t, proxyRelay(t, l.at(t, "tcp/8443")), "a.example.com"); err != nil || got != "passed a.example.com" {
		t.Errorf("TLS Passthrough behind a PROXY header: %q, %v; want \"passed a.example.com\"", got, err)
	}
}
