package dataplane

import (
	"bufio"
	"net"
)

// h2cReadSize is the read buffer of a plain-text HTTP/2 connection: a
// client's frames for dozens of concurrent requests come in one read.
const h2cReadSize = 4 << 10

// h2cPreface is how an HTTP/2 client with prior knowledge begins.
const h2cPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// h2cConn buffers the reads of a connection that turns out to speak
// HTTP/2 without TLS. net/http's HTTP/2 server reads its frames straight
// from the connection, a frame header of 9 bytes and then the frame, two
// system calls for every frame: on an h2c connection that was 2 of the 6
// system calls of each request. Over TLS the records are buffered below
// (crypto/tls), and an HTTP/1.1 connection is read through net/http's own
// buffer, so both are left as they are: the buffer is only made once the
// first bytes read are HTTP/2's preface, and an HTTP/1.1 connection costs
// no memory for it.
//
// Only the reader of the connection calls Read (net/http never reads one
// connection from two goroutines at once), so sniffed and br need no lock.
type h2cConn struct {
	net.Conn
	sniffed bool
	br      *bufio.Reader
}

func (c *h2cConn) Read(p []byte) (int, error) {
	if c.br != nil {
		return c.br.Read(p)
	}
	n, err := c.Conn.Read(p)
	if !c.sniffed && n > 0 {
		c.sniffed = true
		if isH2CPreface(p[:n]) {
			c.br = bufio.NewReaderSize(c.Conn, h2cReadSize)
		}
	}
	return n, err
}

// isH2CPreface says whether the first bytes a client sent begin HTTP/2's
// preface: net/http peeks at exactly its first 14 bytes, but a client may
// send fewer in its first segment.
func isH2CPreface(first []byte) bool {
	if len(first) > len(h2cPreface) {
		first = first[:len(h2cPreface)]
	}
	return len(first) >= 3 && string(first) == h2cPreface[:len(first)]
}

// CloseWrite half-closes, when the connection below can: net/http's
// HTTP/1.1 server closes a connection's writing side first.
func (c *h2cConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// NetConn is the connection below, for the connection table (limits.go).
func (c *h2cConn) NetConn() net.Conn { return c.Conn }
