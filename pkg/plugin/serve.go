// Listening and serving: the safe defaults of a plugin's endpoint and the
// whole main of a plugin binary.

package plugin

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/pkg/plugin/pluginpb"
)

// ListenOptions loosen Listen's defaults, each on purpose.
type ListenOptions struct {
	// TLS serves TCP (required there) or a unix socket.
	TLS *tls.Config
	// Insecure serves TCP with TLS but without client certificates:
	// anyone who reaches the port may call the plugin. Only for a network
	// nobody else reaches.
	Insecure bool
	// PeerUID is the uid a unix socket's client must run as; nil: this
	// process's own.
	PeerUID *int
}

// Listen opens endpoint with the safe defaults: "unix:///path/plugin.sock"
// for processes of this uid only (see listenUnix), or "host:port" for TCP
// with mutual TLS (tlsConfig must require and verify client
// certificates, as ServerTLS's does): a plugin may create and delete cloud
// resources, so nobody else may call it.
func Listen(endpoint string, tlsConfig *tls.Config) (net.Listener, error) {
	return ListenWith(endpoint, ListenOptions{TLS: tlsConfig})
}

// ListenWith is Listen with options.
func ListenWith(endpoint string, o ListenOptions) (net.Listener, error) {
	tlsConfig := o.TLS
	if path, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		uid := os.Geteuid()
		if o.PeerUID != nil {
			uid = *o.PeerUID
		}
		ln, err := listenUnix(path, uid)
		if err != nil || tlsConfig == nil {
			return ln, err
		}
		return tls.NewListener(ln, withH2(tlsConfig)), nil
	}
	if tlsConfig == nil {
		return nil, fmt.Errorf("refusing to serve %q over TCP without TLS: use unix:///path or give a certificate", endpoint)
	}
	verified := tlsConfig.ClientAuth == tls.RequireAndVerifyClientCert ||
		(tlsConfig.ClientAuth == tls.RequireAnyClientCert && tlsConfig.VerifyConnection != nil) // ServerTLS's
	if !verified && !o.Insecure {
		return nil, fmt.Errorf("refusing to serve %q over TCP without client authentication: give a client CA (mutual TLS), or --insecure if nobody else can reach the port", endpoint)
	}
	ln, err := net.Listen("tcp", endpoint)
	if err != nil {
		return nil, err
	}
	return tls.NewListener(ln, withH2(tlsConfig)), nil
}

// withH2: gRPC clients insist on negotiating HTTP/2 by ALPN.
func withH2(c *tls.Config) *tls.Config {
	c = c.Clone()
	if !slices.Contains(c.NextProtos, "h2") {
		c.NextProtos = append(c.NextProtos, "h2")
	}
	return c
}

// Serve serves provider on ln until ctx ends, without calling its
// Initialize.
func Serve(ctx context.Context, ln net.Listener, provider cloudprovider.Interface, info Info) error {
	return ServeWith(ctx, ln, provider, info, ServeOptions{})
}

// ServeWith serves provider on ln until ctx ends, as o says.
func ServeWith(ctx context.Context, ln net.Listener, provider cloudprovider.Interface, info Info, o ServeOptions) error {
	var opts []grpc.ServerOption
	s := newServer(provider, info)
	if o.ClientBuilder != nil {
		init := newInitializer(provider, o.ClientBuilder, ctx.Done())
		opts = append(opts, grpc.ChainUnaryInterceptor(init.unary), grpc.ChainStreamInterceptor(init.stream))
		s.initialized = init.ready
	}
	srv := grpc.NewServer(opts...)
	pluginpb.RegisterCloudProviderServer(srv, s)
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// Main is a plugin's whole main: it builds the provider with factory from
// the --cloud-config file (if given), serves it on --endpoint until SIGINT
// or SIGTERM, and exits non-zero on error. The provider's Initialize runs
// on the first call of a leading Outrigger (ServeOptions), with a client
// builder from --kubeconfig or the pod's ServiceAccount.
func Main(factory cloudprovider.Factory, info Info) {
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	endpoint := fs.String("endpoint", DefaultEndpoint, "unix:///path (its directory is created private if missing), or host:port with --tls-cert, --tls-key and --tls-client-ca")
	config := fs.String("cloud-config", "", "the provider's configuration file")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig for the provider's Kubernetes clients (its Initialize's client builder); empty: the pod's ServiceAccount, if mounted")
	certFile := fs.String("tls-cert", "", "server certificate (PEM), for TCP")
	keyFile := fs.String("tls-key", "", "server key (PEM), for TCP")
	clientCA := fs.String("tls-client-ca", "", "CA (PEM) client certificates must chain to (mutual TLS); required over TCP unless --insecure")
	var clientSANs []string
	fs.Func("tls-client-san", "a DNS name or URI (a SPIFFE ID) the client's certificate must name, with --tls-client-ca (repeatable; none: any certificate the CA signed)", func(v string) error {
		clientSANs = append(clientSANs, v)
		return nil
	})
	insecure := fs.Bool("insecure", false, "over TCP, serve without client authentication: anyone who reaches the port may call the plugin")
	peer := fs.Int("peer-uid", -1, "on a unix socket, the uid Outrigger runs as (default: this plugin's own)")
	_ = fs.Parse(os.Args[1:])
	lo := ListenOptions{Insecure: *insecure}
	if *peer >= 0 {
		lo.PeerUID = peer
	}
	if *insecure {
		fmt.Fprintf(os.Stderr, "%s: warning: --insecure: serving without client authentication, anyone who reaches %s may create and delete cloud resources\n", os.Args[0], *endpoint)
	}
	if err := run(factory, info, *endpoint, *config, *kubeconfig, *certFile, *keyFile, *clientCA, clientSANs, lo); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[0], err)
		os.Exit(1)
	}
}

func run(factory cloudprovider.Factory, info Info, endpoint, config, kubeconfig, certFile, keyFile, clientCA string, clientSANs []string, lo ListenOptions) error {
	var cfg io.Reader
	if config != "" {
		f, err := os.Open(config)
		if err != nil {
			return fmt.Errorf("cannot read --cloud-config: %w", err)
		}
		defer f.Close()
		cfg = f
	}
	provider, err := factory(cfg)
	if err != nil {
		return err
	}
	var tlsConfig *tls.Config
	if certFile != "" || keyFile != "" {
		if tlsConfig, err = ServerTLS(certFile, keyFile, clientCA, clientSANs); err != nil {
			return err
		}
	}
	lo.TLS = tlsConfig
	ln, err := ListenWith(endpoint, lo)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return ServeWith(ctx, ln, provider, info, ServeOptions{ClientBuilder: ClientBuilderFor(kubeconfig)})
}
