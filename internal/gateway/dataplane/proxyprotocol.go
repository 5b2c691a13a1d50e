package dataplane

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// PROXY protocol (HAProxy's specification, versions 1 and 2): a load
// balancer that relays a TCP connection without keeping the client's
// address as the source sends, before anything of the client's, a header
// saying whose connection it is. With a Gateway's proxyProtocol setting
// every connection of its TCP-based ports must start with one: the
// header's source becomes the connection's client address (what
// X-Forwarded-For, X-Real-IP and the logs carry). A header is read only
// when the setting asks for it, for from anyone else it is a claim:
// a client reaching the data plane directly could say it is anyone.
//
// Everything here comes from the network, so it is bounded: a version 1
// header in its 107 bytes, a version 2 header's TLVs in maxV2TLVBytes,
// and both in the request header timeout. A connection whose header is
// missing, malformed or late is closed; it costs nothing but itself, for
// the header is read in the connection's own goroutine (on its first
// Read or RemoteAddr), never in the accept loop.

const (
	// maxV1Header is the longest version 1 header, its CRLF included
	// (the specification's bound: TCP6 with the longest addresses).
	maxV1Header = 107
	// maxV2TLVBytes bounds what a version 2 header may carry beyond its
	// addresses. Load balancers send a few TLVs (a connection ID, a VPC
	// endpoint, an SSL summary), well within this; the 64 KiB the length
	// field allows would be buffering a client chooses.
	maxV2TLVBytes = 1 << 10
	// v2HeaderLen is the fixed part of a version 2 header: signature,
	// version and command, family and protocol, length.
	v2HeaderLen = 16
)

// v2Signature starts every version 2 header.
var v2Signature = []byte("\r\n\r\n\x00\r\nQUIT\n")

// errProxyHeader is every refusal of a header; its text says why.
var errProxyHeader = errors.New("PROXY protocol header")

func proxyErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errProxyHeader, fmt.Sprintf(format, args...))
}

// proxyHeader is what a valid header says. local: it names no client
// (version 2's LOCAL command, a load balancer's own health check;
// version 1's UNKNOWN; version 2's UNSPEC or UNIX family), and the
// connection's own address stands.
type proxyHeader struct {
	src, dst netip.AddrPort
	local    bool
}

// readProxyHeader reads one header from r and no byte more: what follows
// stays in r for the connection's user.
func readProxyHeader(r *bufio.Reader) (proxyHeader, error) {
	// The shortest header of either version is longer than the
	// signature (version 1's "PROXY UNKNOWN\r\n" is 15 bytes), so
	// peeking it waits for nothing a valid sender does not send.
	head, err := r.Peek(len(v2Signature))
	if err != nil {
		return proxyHeader{}, proxyErr("reading: %v", err)
	}
	switch {
	case bytes.Equal(head, v2Signature):
		return readProxyV2(r)
	case bytes.HasPrefix(head, []byte("PROXY ")):
		return readProxyV1(r)
	}
	return proxyHeader{}, proxyErr("the connection does not start with one")
}

// readProxyV1 reads "PROXY TCP4|TCP6 src dst sport dport\r\n" or
// "PROXY UNKNOWN...\r\n", strictly: single spaces, addresses of the
// family named, ports in decimal without leading zeros.
func readProxyV1(r *bufio.Reader) (proxyHeader, error) {
	line := make([]byte, 0, maxV1Header)
	for {
		b, err := r.ReadByte()
		if err != nil {
			return proxyHeader{}, proxyErr("version 1 cut short: %v", err)
		}
		line = append(line, b)
		if b == '\n' {
			break
		}
		if len(line) >= maxV1Header {
			return proxyHeader{}, proxyErr("version 1 longer than %d bytes", maxV1Header)
		}
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return proxyHeader{}, proxyErr("version 1 line does not end in CRLF")
	}
	fields := strings.Split(string(line[:len(line)-2]), " ")
	if len(fields) >= 2 && fields[1] == "UNKNOWN" {
		// The specification has the receiver ignore the rest.
		return proxyHeader{local: true}, nil
	}
	if len(fields) != 6 {
		return proxyHeader{}, proxyErr("version 1 has %d fields, want 6", len(fields))
	}
	var want func(netip.Addr) bool
	switch fields[1] {
	case "TCP4":
		want = netip.Addr.Is4
	case "TCP6":
		want = func(a netip.Addr) bool { return a.Is6() && a.Zone() == "" }
	default:
		return proxyHeader{}, proxyErr("version 1 protocol %q", fields[1])
	}
	src, err1 := netip.ParseAddr(fields[2])
	dst, err2 := netip.ParseAddr(fields[3])
	if err1 != nil || err2 != nil || !want(src) || !want(dst) {
		return proxyHeader{}, proxyErr("version 1 addresses %q %q are not %s", fields[2], fields[3], fields[1])
	}
	sport, err1 := parsePort(fields[4])
	dport, err2 := parsePort(fields[5])
	if err1 != nil || err2 != nil {
		return proxyHeader{}, proxyErr("version 1 ports %q %q", fields[4], fields[5])
	}
	return proxyHeader{src: netip.AddrPortFrom(src, sport), dst: netip.AddrPortFrom(dst, dport)}, nil
}

func parsePort(s string) (uint16, error) {
	if len(s) > 1 && s[0] == '0' {
		return 0, errors.New("leading zero")
	}
	n, err := strconv.ParseUint(s, 10, 16)
	return uint16(n), err
}

// readProxyV2 reads a version 2 header: the fixed 16 bytes, then the
// addresses and TLVs its length announces, the TLVs skipped.
func readProxyV2(r *bufio.Reader) (proxyHeader, error) {
	var fixed [v2HeaderLen]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return proxyHeader{}, proxyErr("version 2 cut short: %v", err)
	}
	verCmd, famProto := fixed[12], fixed[13]
	length := int(binary.BigEndian.Uint16(fixed[14:]))
	if verCmd>>4 != 2 {
		return proxyHeader{}, proxyErr("version 2 signature with version %d", verCmd>>4)
	}
	cmd := verCmd & 0x0f
	if cmd > 1 {
		return proxyHeader{}, proxyErr("version 2 command %d", cmd)
	}
	family, proto := famProto>>4, famProto&0x0f
	addrLen := 0
	switch family {
	case 0: // UNSPEC
	case 1:
		addrLen = 12
	case 2:
		addrLen = 36
	case 3:
		addrLen = 216
	default:
		return proxyHeader{}, proxyErr("version 2 family %d", family)
	}
	if proto > 2 {
		return proxyHeader{}, proxyErr("version 2 transport %d", proto)
	}
	if length < addrLen && cmd == 1 {
		return proxyHeader{}, proxyErr("version 2 length %d is shorter than its addresses (%d)", length, addrLen)
	}
	if length-min(addrLen, length) > maxV2TLVBytes {
		return proxyHeader{}, proxyErr("version 2 carries %d bytes beyond its addresses, more than %d", length-addrLen, maxV2TLVBytes)
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(r, body); err != nil {
		return proxyHeader{}, proxyErr("version 2 cut short: %v", err)
	}
	if cmd == 0 {
		// LOCAL: the load balancer's own connection (a health check);
		// whatever addresses it carries are not a client's.
		return proxyHeader{local: true}, nil
	}
	switch family {
	case 1, 2:
		if proto != 1 {
			// A datagram or unspecified transport over a TCP
			// connection is no header a load balancer sends.
			return proxyHeader{}, proxyErr("version 2 transport %d for a TCP connection", proto)
		}
	default:
		// UNSPEC or UNIX: no address this side can use.
		return proxyHeader{local: true}, nil
	}
	n := 4
	if family == 2 {
		n = 16
	}
	src, _ := netip.AddrFromSlice(body[:n])
	dst, _ := netip.AddrFromSlice(body[n : 2*n])
	sport := binary.BigEndian.Uint16(body[2*n:])
	dport := binary.BigEndian.Uint16(body[2*n+2:])
	return proxyHeader{src: netip.AddrPortFrom(src, sport), dst: netip.AddrPortFrom(dst, dport)}, nil
}

// proxyConn is an accepted connection that must begin with a PROXY
// header. The header is read once, by whichever comes first of Read and
// RemoteAddr (http.Server asks for the address first, in the connection's
// goroutine; a TCP or TLS port calls handshake), by deadline: the
// connection's user sees only what follows it, and the header's client
// as RemoteAddr.
type proxyConn struct {
	net.Conn
	deadline time.Time
	log      logr.Logger

	once   sync.Once
	r      *bufio.Reader
	remote net.Addr
	err    error

	// mu guards the read deadline the connection's user asked for
	// while the header's own held: it is put in place once the header
	// is read.
	mu           sync.Mutex
	done         bool
	userDeadline time.Time
}

func newProxyConn(c net.Conn, deadline time.Time, log logr.Logger) *proxyConn {
	return &proxyConn{Conn: c, deadline: deadline, log: log}
}

// handshake reads the header, once; an error closes the connection.
func (c *proxyConn) handshake() error {
	c.once.Do(func() {
		_ = c.Conn.SetReadDeadline(c.deadline)
		// Large enough for any header this side accepts, so that
		// reading one is a read or two, not one per byte.
		c.r = bufio.NewReaderSize(c.Conn, 512)
		h, err := readProxyHeader(c.r)
		c.mu.Lock()
		c.done = true
		_ = c.Conn.SetReadDeadline(c.userDeadline)
		c.mu.Unlock()
		if err != nil {
			c.err = err
			c.log.V(2).Info("Connection closed: no valid PROXY protocol header", "peer", c.Conn.RemoteAddr().String(), "err", err)
			_ = c.Conn.Close()
			return
		}
		if !h.local {
			c.remote = net.TCPAddrFromAddrPort(netip.AddrPortFrom(h.src.Addr().Unmap(), h.src.Port()))
		}
	})
	return c.err
}

func (c *proxyConn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	if c.r.Buffered() > 0 {
		return c.r.Read(p)
	}
	return c.Conn.Read(p)
}

// RemoteAddr is the client the header named, or the connection's own
// peer (a LOCAL header, or no valid header: then the connection is
// closed, and the address only names it in logs).
func (c *proxyConn) RemoteAddr() net.Addr {
	if c.handshake() == nil && c.remote != nil {
		return c.remote
	}
	return c.Conn.RemoteAddr()
}

func (c *proxyConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.userDeadline = t
	if !c.done {
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *proxyConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.userDeadline = t
	if !c.done {
		return c.Conn.SetWriteDeadline(t)
	}
	return c.Conn.SetDeadline(t)
}

// CloseWrite half-closes, when the connection below can.
func (c *proxyConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// NetConn is the connection below, for the connection table (limits.go).
func (c *proxyConn) NetConn() net.Conn { return c.Conn }

// proxyListener hands out connections that must begin with a PROXY
// header while the settings ask for it: a change of the setting applies
// to the connections accepted after it, as a change of timeouts does.
// Nothing is read here: the accept loop never waits on a client.
type proxyListener struct {
	net.Listener
	p *Proxy
}

func (l *proxyListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	st := l.p.settings.Load()
	if !st.proxyProtocol {
		return c, nil
	}
	return newProxyConn(c, time.Now().Add(st.requestHeader), l.p.opts.Log), nil
}
