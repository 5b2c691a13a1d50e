package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/secureserving"
)

// securePort builds the secure port from the flags, or returns nil when
// --secure-port is 0. readyz may gain checks until the port starts.
func securePort(ctx context.Context, opts *Options, cfg *rest.Config, readyz map[string]healthz.Checker, health *healthChecks) (*secureserving.Server, error) {
	if opts.Serving.BindPort == 0 {
		return nil, nil
	}
	srv, err := secureserving.New(ctx, secureserving.Options{
		Serving:             opts.Serving,
		Authentication:      opts.Authentication,
		Authorization:       opts.Authorization,
		OpenMetrics:         opts.DisableMetricsAuthentication,
		Profiling:           opts.Profiling,
		ContentionProfiling: opts.ContentionProfiling,
		Readyz:              readyz,
		Healthz:             health.all,
		// controller-runtime's registry and component-base's, where
		// providers register theirs.
		Metrics:  servedMetrics(),
		Handlers: map[string]http.Handler{"/configz": opts.configzHandler()},
		Listener: secureListener(opts),
	}, cfg)
	if err != nil {
		return nil, fmt.Errorf("secure port: %w", err)
	}
	return srv, nil
}

// servingManager runs the secure port beside the manager as controller-runtime
// runs its own metrics server: serving before the caches sync (the kubelet
// probes it meanwhile, and a replica that is not the leader serves it too)
// and stopping after everything else has.
type servingManager struct {
	manager.Manager
	port *secureserving.Server
}

// Start runs the port and the manager until ctx ends or either fails.
func (m servingManager) Start(ctx context.Context) error {
	portCtx, stopPort := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPort()
	mgrCtx, stopManager := context.WithCancel(ctx)
	defer stopManager()
	portDone := make(chan error, 1)
	go func() { portDone <- m.port.Start(portCtx) }()
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- m.Manager.Start(mgrCtx) }()
	select {
	case err := <-mgrDone:
		stopPort()
		return errors.Join(err, <-portDone)
	case err := <-portDone:
		// The port could not serve (its address taken, say): the
		// replica would be unprobed and unscraped, so it stops.
		stopManager()
		return errors.Join(err, <-mgrDone)
	}
}

// healthChecks are the checks of the controllers started so far, served
// on /healthz by controller name as upstream's are.
type healthChecks struct {
	mu     sync.Mutex
	checks map[string]healthz.Checker
	// added, when set, is told of each check added.
	added func(name string, check healthz.Checker)
}

func (h *healthChecks) add(name string, check healthz.Checker) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.checks == nil {
		h.checks = map[string]healthz.Checker{}
	}
	h.checks[name] = check
	if h.added != nil {
		h.added(name, check)
	}
}

func (h *healthChecks) all() map[string]healthz.Checker {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.checks)
}

// secureListener is the port a provider's main already bound, or nil.
func secureListener(opts *Options) net.Listener {
	if opts.Extension == nil {
		return nil
	}
	return opts.Extension.SecureListener
}
