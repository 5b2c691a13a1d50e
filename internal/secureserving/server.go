// Package secureserving is the secure port of the upstream
// cloud-controller-manager: /healthz, /livez and /readyz open to all
// (kubelet probes carry no credentials); /metrics, /configz, /debug/pprof
// and whatever else the command adds (the console) to callers the API
// server authenticates (a client certificate, or a token through
// TokenReview) and authorizes (SubjectAccessReview on the non-resource
// path), as k8s.io/apiserver's delegated authentication and authorization
// do. Its flags are upstream's secure serving, authentication and
// authorization flags.
//
// A Server is built from Options with New and runs with Start until its
// context ends, as controller-runtime's metrics server does.
package secureserving

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	goruntime "runtime"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// shutdownGrace is how long requests under way may finish once the port
// is told to stop.
const shutdownGrace = time.Minute

// Server is the secure port.
type Server struct {
	opts    Options
	addr    string
	tls     *tls.Config
	watcher *certwatcher.CertWatcher
	auth    *delegated

	mu       sync.Mutex
	started  bool
	handlers map[string]http.Handler
}

// New checks the certificates and builds the delegated authentication and
// authorization against the API server of main, reading its client CAs
// unless the flags give them. It serves nothing until Start.
func New(ctx context.Context, o Options, main *rest.Config) (*Server, error) {
	if o.Serving.BindPort <= 0 {
		return nil, fmt.Errorf("--secure-port %d: no port to serve on", o.Serving.BindPort)
	}
	tlsOpt, errs := o.Serving.tlsSettings()
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	getCert, watcher, err := o.Serving.certificates()
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		GetCertificate: getCert,
		// Client certificates are checked by the authenticator, against
		// --client-ca-file and the front proxies' CA.
		ClientAuth: tls.RequestClientCert,
	}
	tlsOpt(cfg)
	auth, err := newDelegated(ctx, &o, main)
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts:     o,
		addr:     net.JoinHostPort(o.Serving.BindAddress.String(), strconv.Itoa(o.Serving.BindPort)),
		tls:      cfg,
		watcher:  watcher,
		auth:     auth,
		handlers: map[string]http.Handler{},
	}
	live := &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}}
	ready := withheld(o.Readyz)
	var health http.Handler = live
	if o.Healthz != nil {
		health = http.HandlerFunc(func(resp http.ResponseWriter, req *http.Request) {
			checks := withheld(o.Healthz())
			checks["ping"] = healthz.Ping
			checks.ServeHTTP(resp, req)
		})
	}
	for p, h := range map[string]http.Handler{"/healthz": health, "/livez": live, "/readyz": ready} {
		// The health handler reads the path below its prefix as the name
		// of one check.
		s.handlers[p] = http.StripPrefix(p, h)
		s.handlers[p+"/"] = http.StripPrefix(p, h)
	}
	if o.Profiling {
		s.handlers["/debug/pprof/"] = http.HandlerFunc(pprof.Index)
		s.handlers["/debug/pprof/cmdline"] = http.HandlerFunc(pprof.Cmdline)
		s.handlers["/debug/pprof/profile"] = http.HandlerFunc(pprof.Profile)
		s.handlers["/debug/pprof/symbol"] = http.HandlerFunc(pprof.Symbol)
		s.handlers["/debug/pprof/trace"] = http.HandlerFunc(pprof.Trace)
		if o.ContentionProfiling {
			goruntime.SetBlockProfileRate(1)
			goruntime.SetMutexProfileFraction(1)
		}
	}
	if o.Metrics != nil {
		s.handlers["/metrics"] = promhttp.HandlerFor(o.Metrics, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
	}
	for p, h := range o.Handlers {
		if err := s.AddHandler(p, h); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// withheld wraps each readiness check so that a failure's reason goes to
// the log, not to the caller: /readyz is open to anyone who reaches the
// port, and a reason (a plugin's error, a provider/family list) tells an
// outsider much. The map is read at each request, so checks added after
// New are wrapped too.
type withheld map[string]healthz.Checker

func (w withheld) ServeHTTP(resp http.ResponseWriter, req *http.Request) {
	(&healthz.Handler{Checks: w.wrap()}).ServeHTTP(resp, req)
}

func (w withheld) wrap() map[string]healthz.Checker {
	out := make(map[string]healthz.Checker, len(w))
	for name, check := range w {
		out[name] = func(req *http.Request) error {
			if err := check(req); err != nil {
				klog.FromContext(req.Context()).V(1).Info("Readiness check failed", "check", name, "err", err)
				return errReasonWithheld
			}
			return nil
		}
	}
	return out
}

var errReasonWithheld = errors.New("reason withheld (in Outrigger's log)")

// AddHandler serves h on path, behind authentication and authorization
// unless the path is always allowed. It fails once the port has started,
// or for a path already served.
func (s *Server) AddHandler(path string, h http.Handler) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("serving %s: the secure port has started", path)
	}
	if _, ok := s.handlers[path]; ok {
		return fmt.Errorf("serving %s: the path is served already", path)
	}
	s.handlers[path] = h
	return nil
}

// NeedLeaderElection is false: every replica serves its probes and metrics.
func (s *Server) NeedLeaderElection() bool { return false }

// Start listens and serves until ctx ends, then lets the requests under way
// finish for up to a minute.
func (s *Server) Start(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("secure-serving")
	ctx = klog.NewContext(ctx, log)
	handler := s.mux()
	ln := s.opts.Listener
	if ln == nil {
		lc := s.opts.Serving.listenConfig()
		var err error
		if ln, err = lc.Listen(ctx, "tcp", s.addr); err != nil {
			return fmt.Errorf("listening on the secure port: %w", err)
		}
	}
	s.auth.watchCAFiles(ctx)
	if s.watcher != nil {
		go func() {
			if err := s.watcher.Start(ctx); err != nil {
				log.Error(err, "Watching the serving certificate; the one loaded is served until restart")
			}
		}()
	}
	srv := &http.Server{
		Handler:           handler,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		MaxHeaderBytes:    1 << 20,
		ReadHeaderTimeout: 30 * time.Second,
		// Longer than a client's keep-alive, so that the client, not the
		// server, closes an idle connection.
		IdleTimeout: 90 * time.Second,
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			log.Error(err, "Stopping the secure port")
		}
	}()
	log.Info("Serving", "address", ln.Addr().String())
	if err := srv.Serve(tls.NewListener(ln, s.tls)); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving the secure port: %w", err)
	}
	<-stopped
	return nil
}

// mux routes every path to its handler, each behind authentication and
// authorization; /metrics is open to all with OpenMetrics. An unknown path
// is a plain 404.
func (s *Server) mux() *http.ServeMux {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = true
	mux := http.NewServeMux()
	for p, h := range s.handlers {
		if !(p == "/metrics" && s.opts.OpenMetrics) {
			h = s.auth.wrap(h)
		}
		mux.Handle(p, h)
	}
	return mux
}
