package gateway

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/features"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// serving is one way of serving a Gateway, chosen once in Setup:
// Outrigger's data plane behind a load balancer Service
// (dataPlaneServing), or the provider's own layer-7 load balancers
// (cloudServing). Everything else (gathering, compiling, statuses) is the
// same for both.
type serving interface {
	// setup adds what this way of serving needs to the manager.
	setup(mgr ctrl.Manager) error
	// refused are the transport protocols the load balancer refused for
	// this generation of the Gateway, with the provider's words.
	refused(ctx context.Context, gw *gwv1.Gateway) (map[corev1.Protocol]string, error)
	// serve makes what serves the compiled Gateway (or removes it when
	// res has no ports) and says where it stands.
	serve(ctx context.Context, gw *gwv1.Gateway, w *world, res *result) (front, error)
	// keep leaves what serves the Gateway as it is (a load balancer, its
	// address, the programming it serves) and says where it stands, with
	// why (invalid) nothing new is programmed.
	keep(ctx context.Context, gw *gwv1.Gateway, invalid string) (front, error)
	// remove deletes what serves the Gateway; it says whether all is gone.
	remove(ctx context.Context, gw *gwv1.Gateway) (bool, error)
	// supported are the features of fs this way of serving serves, which
	// a GatewayClass states.
	supported(fs []features.FeatureName) []features.FeatureName
}

// dataPlaneServing serves a Gateway with Outrigger's data plane: its
// programming in a Secret, its pods in a Deployment (when an image is
// configured), behind a Service of type LoadBalancer that the provider
// serves as any other.
type dataPlaneServing struct {
	r *reconciler
	// mode is Options.NamespaceMode: where the data plane objects are
	// made, and so whether the class states GatewayInfrastructure.
	mode NamespaceMode
}

func (s *dataPlaneServing) setup(mgr ctrl.Manager) error {
	if s.mode == NamespaceGateway {
		// Each data plane goes to its Gateway's namespace, which exists.
		return nil
	}
	return mgr.Add(leaderRunnable(s.ensureNamespace))
}

// ensureNamespace makes the data plane namespace when it is missing.
func (s *dataPlaneServing) ensureNamespace(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.r.opts.Namespace, Labels: map[string]string{managedByLabel: managedBy}}}
	if err := s.r.client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the data plane namespace %s: %w", s.r.opts.Namespace, err)
	}
	return nil
}

func (s *dataPlaneServing) refused(ctx context.Context, gw *gwv1.Gateway) (map[corev1.Protocol]string, error) {
	return s.r.refusedProtocols(ctx, gw)
}

func (s *dataPlaneServing) serve(ctx context.Context, gw *gwv1.Gateway, w *world, res *result) (front, error) {
	r := s.r
	data, err := res.config.Marshal()
	if err != nil {
		r.recorder.Eventf(gw, corev1.EventTypeWarning, "DataPlaneSyncFailed", "Error programming the data plane: %v", err)
		return front{}, err
	}
	if len(data) > maxConfigSize {
		return s.keep(ctx, gw, fmt.Sprintf("the data plane's configuration would be %d bytes, more than the %d a Secret holds: not written, "+
			"the data plane keeps its last one (fewer hostnames, rules or matches per Gateway fit)", len(data), maxConfigSize))
	}
	// The data plane's own code on what is about to be written: compile
	// refuses every route the data plane would (FuzzCompile holds it to
	// that), so this only fires on a bug, and then costs this Gateway a
	// stale programming rather than every pod refusing it.
	if err := dataplane.Check(&res.config); err != nil {
		r.recorder.Eventf(gw, corev1.EventTypeWarning, "DataPlaneSyncFailed", "Not programming the data plane: it would refuse the configuration: %v", err)
		return s.keep(ctx, gw, fmt.Sprintf("the data plane would refuse this configuration (%v): not written, the data plane keeps its last one", err))
	}
	if err := r.writeConfig(ctx, gw, data); err != nil {
		r.recorder.Eventf(gw, corev1.EventTypeWarning, "DataPlaneSyncFailed", "Error programming the data plane: %v", err)
		return front{}, err
	}
	svc, err := r.ensureService(ctx, gw, res.ports, res.params)
	if err != nil {
		r.recorder.Eventf(gw, corev1.EventTypeWarning, "SyncLoadBalancerFailed", "Error syncing the load balancer's Service: %v", err)
		return front{}, err
	}
	if split, err := r.recordRefusal(ctx, gw, svc, w.refused); err != nil || split {
		// The Service's change brings the Gateway back.
		return front{wait: true}, err
	}
	dataPlaneReady := true
	if svc != nil {
		if dataPlaneReady, err = r.ensureDataPlane(ctx, gw, res.ports, res.params); err != nil {
			r.recorder.Eventf(gw, corev1.EventTypeWarning, "DataPlaneSyncFailed", "Error syncing the data plane Deployment: %v", err)
			return front{}, err
		}
	}
	return serviceFront(svc, dataPlaneReady), nil
}

// supported is every feature: Outrigger's data plane serves all it
// compiles. GatewayInfrastructure is stated in NamespaceGateway mode only:
// spec.infrastructure's labels and annotations reach the data plane's
// objects in both modes, but the feature's conformance test looks for
// them in the Gateway's own namespace, where only that mode makes them.
func (s *dataPlaneServing) supported(fs []features.FeatureName) []features.FeatureName {
	if s.mode == NamespaceGateway {
		return append(slices.Clip(fs), features.SupportGatewayInfrastructure)
	}
	return fs
}

func (s *dataPlaneServing) remove(ctx context.Context, gw *gwv1.Gateway) (bool, error) {
	return s.r.deleteDataPlane(ctx, gw)
}

// maxConfigSize is the most a data plane's configuration may be: what one
// Secret holds.
const maxConfigSize = corev1.MaxSecretSize

// keep refuses a configuration before anything is written, saying why
// (invalid): one no Secret holds (the API server would refuse the write
// itself, and with it every status), one the data plane would refuse, or
// a Gateway whose parameters are invalid. The data plane keeps the
// programming it has, and what serves it stays as it is; the Gateway says
// why it is not programmed. Nothing retrying could fix: a change to the
// Gateway, its routes or its parameters brings it back.
func (s *dataPlaneServing) keep(ctx context.Context, gw *gwv1.Gateway, invalid string) (front, error) {
	var svc corev1.Service
	f := front{}
	switch err := s.r.client.Get(ctx, s.r.key(gw), &svc); {
	case err == nil && owned(&svc, gw):
		f = serviceFront(&svc, true)
	case err != nil && !apierrors.IsNotFound(err):
		return front{}, fmt.Errorf("reading Service %s: %w", s.r.key(gw), err)
	}
	f.invalid = invalid
	return f, nil
}
