package dataplane

import (
	"net"
	"net/http"
	"strings"
)

// An HTTPS port serves several listeners, told apart by hostname. The
// client's server name (SNI) picks the listener whose certificate the
// connection gets; its requests' Host picks a listener again. A client may
// send, on a connection made for one name, a request for a host of another
// listener (HTTP/2 connection reuse across names a certificate covers):
// such a request was not authenticated by the listener that would serve
// it, so it is answered 421 Misdirected Request (RFC 9110 15.5.20) and the
// client retries on a connection of its own, as Gateway API asks
// (GatewayHTTPSListenerDetectMisdirectedRequests).

// mostSpecific is the index of the listener hostname, of the n that
// hostname gives, that serves name: an exact hostname, then the longest
// wildcard covering it (a wildcard stands for one label or more), then a
// listener without hostname (""). ok is false when none serves it. The
// certificate a connection gets and the listener a request belongs to are
// both chosen by it, so the two always agree.
func mostSpecific(n int, hostname func(int) string, name string) (i int, ok bool) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	wild, anyHost := -1, -1
	for i := range n {
		h := hostname(i)
		switch {
		case h == name && name != "":
			return i, true
		case strings.HasPrefix(h, "*.") && strings.HasSuffix(name, h[1:]) && len(name) > len(h)-1:
			if wild < 0 || len(h) > len(hostname(wild)) {
				wild = i
			}
		case h == "":
			anyHost = i
		}
	}
	switch {
	case wild >= 0:
		return wild, true
	case anyHost >= 0:
		return anyHost, true
	}
	return -1, false
}

// misdirected says whether a request on a TLS connection asks for a host
// that a listener other than the connection's (by its server name) serves.
// A host no listener of the port serves is not misdirected: no route has
// it, and the router answers 404.
func misdirected(listeners []string, serverName, host string) bool {
	if strings.IndexByte(host, ':') >= 0 {
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
	}
	at := func(i int) string { return listeners[i] }
	conn, ok := mostSpecific(len(listeners), at, serverName)
	if !ok {
		return false // no certificate was given: no handshake got here
	}
	req, ok := mostSpecific(len(listeners), at, host)
	return ok && req != conn
}

// answerMisdirected answers a request its connection's listener may not
// serve, and says whether it did.
func (r *router) answerMisdirected(w http.ResponseWriter, req *http.Request) bool {
	if req.TLS == nil || len(r.listeners) == 0 || !misdirected(r.listeners, req.TLS.ServerName, req.Host) {
		return false
	}
	http.Error(w, "misdirected request: this connection's server name is served by another listener", http.StatusMisdirectedRequest)
	return true
}
