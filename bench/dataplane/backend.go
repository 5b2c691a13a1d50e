package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// body is what the backend answers: small, so the proxies' cost per request
// is what is measured, not copying.
var body = []byte("ok\n")

// grpcMessage is a unary call's request and answer: one length-prefixed
// message, uncompressed, holding field 1 = "ok" (the proxies do not look
// inside).
var grpcMessage = []byte{0, 0, 0, 0, 4, 0x0a, 0x02, 'o', 'k'}

// grpcPath is the method called.
const grpcPath = "/bench.Bench/Call"

// backend is the one upstream every peer forwards to, in this process:
// HTTP/1.1 and h2c on plain, HTTP/1.1 and h2 on tls (for the no-proxy rows
// over TLS).
type backend struct {
	plain, tls string
	servers    []*http.Server
}

func startBackend(cert tls.Certificate) (*backend, error) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") == "application/grpc" {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/grpc")
			w.Header().Set("Trailer", "Grpc-Status")
			_, _ = w.Write(grpcMessage)
			w.Header().Set("Grpc-Status", "0")
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	})
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	protos.SetUnencryptedHTTP2(true)
	b := &backend{}
	for _, useTLS := range []bool{false, true} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.close()
			return nil, fmt.Errorf("backend: %w", err)
		}
		srv := &http.Server{Handler: h, Protocols: &protos, ReadHeaderTimeout: 10 * time.Second,
			// Clients cut at the end of a run are not news.
			ErrorLog: log.New(io.Discard, "", 0)}
		b.servers = append(b.servers, srv)
		if useTLS {
			b.tls = l.Addr().String()
			srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
			go func() { _ = srv.ServeTLS(l, "", "") }()
		} else {
			b.plain = l.Addr().String()
			go func() { _ = srv.Serve(l) }()
		}
	}
	return b, nil
}

func (b *backend) close() {
	for _, s := range b.servers {
		_ = s.Close()
	}
}

// certificate is a self-signed certificate for *.bench, in PEM and parsed.
type certificate struct {
	certPEM, keyPEM []byte
	tls             tls.Certificate
}

func newCertificate() (certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "bench"},
		DNSNames:     []string{"*.bench", "localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return certificate{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return certificate{}, err
	}
	c := certificate{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	c.tls, err = tls.X509KeyPair(c.certPEM, c.keyPEM)
	return c, err
}

// serveDataplane is the child that runs Outrigger's data plane: the Config
// in path applied to a proxy listening on 127.0.0.1, until SIGTERM.
func serveDataplane(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	cfg, err := dataplane.Unmarshal(data)
	if err != nil {
		return err
	}
	p := dataplane.New(dataplane.Options{
		Log: logr.Discard(),
		ListenTCP: func(port int32) (net.Listener, error) {
			return dataplane.ListenTCP(net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
		},
		ListenUDP: func(port int32) (net.PacketConn, error) {
			return net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
		},
	})
	// The product's data plane counts every request in its metrics and
	// tunes its collector; so does the one measured.
	dataplane.TuneGC()
	dataplane.NewMetrics(prometheus.NewRegistry(), p)
	if err := p.Apply(cfg); err != nil {
		return err
	}
	if dir := os.Getenv(profileEnv); dir != "" {
		f, err := os.CreateTemp(dir, "outrigger-*.cpu.pprof")
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	p.Close()
	return nil
}
