package secureserving

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	cliflag "k8s.io/component-base/cli/flag"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// Options configure the secure port.
type Options struct {
	Serving        ServingOptions
	Authentication AuthenticationOptions
	Authorization  AuthorizationOptions
	// OpenMetrics serves /metrics without authenticating the caller
	// (--disable-metrics-authentication). Every other path stays behind
	// authentication: the console, /configz and pprof tell far more, and
	// pprof can load the process.
	OpenMetrics bool
	// Profiling serves /debug/pprof; with ContentionProfiling, block and
	// mutex contention are recorded too.
	Profiling           bool
	ContentionProfiling bool
	// Readyz are /readyz's checks. The map is read at each request, so
	// checks may be added to it until the port starts.
	Readyz map[string]healthz.Checker
	// Healthz, when set, gives /healthz's checks besides ping at each
	// request: controllers add theirs once they start, as upstream's
	// cloud-controller-manager serves one per controller.
	Healthz func() map[string]healthz.Checker
	// Metrics is what /metrics serves.
	Metrics prometheus.Gatherer
	// Handlers are served besides, by path, behind authentication and
	// authorization.
	Handlers map[string]http.Handler
	// Listener, when set, is the port already bound (by upstream's
	// options, for a provider's main): served instead of listening anew.
	Listener net.Listener
}

// ServingOptions are upstream's secure serving flags (k8s.io/apiserver's
// SecureServingOptions).
type ServingOptions struct {
	BindAddress                  net.IP
	BindPort                     int
	CertDir                      string
	CertFile                     string
	KeyFile                      string
	SNICertKeys                  []cliflag.NamedCertKey
	CipherSuites                 []string
	CurvePreferences             []int32
	MinTLSVersion                string
	DisableHTTP2                 bool
	HTTP2MaxStreamsPerConnection int
	PermitAddressSharing         bool
	PermitPortSharing            bool
}

// AuthenticationOptions are upstream's delegated authentication flags.
type AuthenticationOptions struct {
	Kubeconfig                 string
	SkipLookup                 bool
	TolerateLookupFailure      bool
	CacheTTL                   time.Duration
	ClientCAFile               string
	RequestHeaderClientCAFile  string
	RequestHeaderAllowedNames  []string
	RequestHeaderUsernames     []string
	RequestHeaderUIDs          []string
	RequestHeaderGroups        []string
	RequestHeaderExtraPrefixes []string
}

// AuthorizationOptions are upstream's delegated authorization flags.
type AuthorizationOptions struct {
	Kubeconfig       string
	AlwaysAllowPaths []string
	AllowCacheTTL    time.Duration
	DenyCacheTTL     time.Duration
}

// Validate returns one error for each thing the flags get wrong, worded
// for the person who typed them.
func (s *ServingOptions) Validate() []error {
	var errs []error
	if s.BindPort < 0 || s.BindPort > 65535 {
		errs = append(errs, fmt.Errorf("--secure-port %d is not a port (0-65535)", s.BindPort))
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file go together"))
	}
	_, tlsErrs := s.tlsSettings()
	return append(errs, tlsErrs...)
}
