package dataplane

import (
	"fmt"
	"net/http/httputil"
	"slices"
)

// compiled is one port's programming, ready to serve.
type compiled struct {
	port     Port
	router   *router
	certs    []certificate
	backends []Backend
	sni      *sniRouter
	// clientAuth is an HTTPS port's check of client certificates; nil
	// asks for none.
	clientAuth *clientAuth
}

// compileConfig turns cfg into each port's programming, or says why it
// cannot be served; it opens nothing.
func compileConfig(cfg *Config, reverse *httputil.ReverseProxy) (map[portKey]compiled, error) {
	want := map[portKey]compiled{}
	client, err := compileBackendClient(cfg.BackendClientCertificate)
	if err != nil {
		return nil, err
	}
	for _, port := range cfg.Ports {
		k := portKey{port: port.Port, udp: port.Protocol == UDP}
		if _, dup := want[k]; dup {
			return nil, fmt.Errorf("port %d/%s listed twice", port.Port, port.Protocol)
		}
		c := compiled{port: port, backends: port.Backends}
		switch port.Protocol {
		case HTTP, HTTPS:
			r, err := compileHTTP(port, reverse, client)
			if err != nil {
				return nil, fmt.Errorf("port %d: %w", port.Port, err)
			}
			c.router = r
			if c.certs, err = loadCertificates(port); err != nil {
				return nil, err
			}
			if port.Protocol == HTTPS && len(c.certs) == 0 {
				return nil, fmt.Errorf("port %d: HTTPS without a certificate", port.Port)
			}
			if c.clientAuth, err = compileClientAuth(port); err != nil {
				return nil, err
			}
		case TLS:
			r, err := compileSNI(port.TLSHosts)
			if err != nil {
				return nil, fmt.Errorf("port %d: %w", port.Port, err)
			}
			c.sni = r
			if c.certs, err = loadCertificates(port); err != nil {
				return nil, err
			}
			if len(c.certs) == 0 && slices.ContainsFunc(port.TLSHosts, func(h TLSHost) bool { return h.Terminate }) {
				return nil, fmt.Errorf("port %d: TLS terminated without a certificate", port.Port)
			}
		case TCP, UDP:
		default:
			return nil, fmt.Errorf("port %d: protocol %q not served", port.Port, port.Protocol)
		}
		want[k] = c
	}
	return want, nil
}

// Check reports whether a data plane would apply cfg, as Apply compiles
// it, without opening anything: the controller runs the data plane's own
// code on what it is about to write, so that no programming it writes is
// one the pods refuse (a refused programming leaves them on the last one).
func Check(cfg *Config) error {
	_, err := compileConfig(cfg, &httputil.ReverseProxy{})
	return err
}
