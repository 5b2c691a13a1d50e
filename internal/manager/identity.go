package manager

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/eventqueue"
)

// identities hands out the per-controller view of the manager. With
// --use-service-account-credentials each controller writes as its own
// ServiceAccount in kube-system (its descriptor's, upstream's names), so the
// audit log and RBAC tell the controllers apart and a controller holds only
// its own rights. Reads still come from the one shared cache, filled by the
// main identity.
type identities struct {
	mgr     manager.Manager
	builder clientbuilder.ControllerClientBuilder
	opts    *Options

	mu   sync.Mutex
	made map[string]*identityManager
	// events sends the controllers' Events when they all act as the
	// process's own identity.
	events *eventSink
}

func newIdentities(mgr manager.Manager, root *rest.Config, opts *Options) (*identities, error) {
	ids := &identities{mgr: mgr, opts: opts, made: map[string]*identityManager{}}
	if !opts.UseServiceAccountCredentials {
		events, err := newEventSink(root, opts)
		if err != nil {
			return nil, err
		}
		if err := mgr.Add(events); err != nil {
			return nil, err
		}
		ids.events = events
		return ids, nil
	}
	core, err := kubernetes.NewForConfig(root)
	if err != nil {
		return nil, fmt.Errorf("client for service account tokens: %w", err)
	}
	// Tokens come from the TokenRequest API and are renewed before they
	// expire; the ServiceAccount is created when missing, as upstream.
	// The builder adds each account's token to a config that must carry
	// no credentials of its own (nor an impersonation).
	ids.builder = clientbuilder.NewDynamicClientBuilder(rest.AnonymousClientConfig(root), core.CoreV1(), "kube-system")
	return ids, nil
}

// forController returns the manager the controller is set up with: the
// manager itself, or one whose client and Event recorder act as the
// controller's ServiceAccount.
func (ids *identities) forController(target manager.Manager, controller string) (manager.Manager, error) {
	if ids.builder == nil {
		return &identityManager{Manager: target, client: target.GetClient(), events: ids.events}, nil
	}
	sa := serviceAccounts[controller]
	if ext := ids.opts.Extension; ext != nil && ext.ClientNames[controller] != "" {
		sa = ext.ClientNames[controller]
	}
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if m, ok := ids.made[sa]; ok {
		return &identityManager{Manager: target, client: m.client, events: m.events}, nil
	}
	cfg, err := ids.builder.Config(sa)
	if err != nil {
		return nil, fmt.Errorf("credentials of service account kube-system/%s for %s: %w", sa, controller, err)
	}
	cfg.QPS, cfg.Burst = ids.opts.APIQPS(), ids.opts.APIBurst()
	c, err := client.New(cfg, client.Options{
		Scheme: ids.mgr.GetScheme(),
		Mapper: ids.mgr.GetRESTMapper(),
		Cache:  &client.CacheOptions{Reader: ids.mgr.GetCache()},
	})
	if err != nil {
		return nil, fmt.Errorf("client of service account kube-system/%s: %w", sa, err)
	}
	events, err := newEventSink(cfg, ids.opts)
	if err != nil {
		return nil, fmt.Errorf("the Event client of service account kube-system/%s: %w", sa, err)
	}
	if err := ids.mgr.Add(events); err != nil {
		return nil, err
	}
	m := &identityManager{Manager: target, client: c, events: events}
	ids.made[sa] = m
	return m, nil
}

// identityManager is a manager whose writes and Events go out as one
// controller's ServiceAccount.
type identityManager struct {
	manager.Manager
	client client.Client
	events *eventSink
}

func (m *identityManager) GetClient() client.Client { return m.client }

//nolint:staticcheck // core/v1 Events, as upstream writes them
func (m *identityManager) GetEventRecorderFor(name string) record.EventRecorder {
	return m.events.queue.Recorder(corev1.EventSource{Component: name})
}

// eventSink sends one identity's Events while the manager runs, through a
// queue that counts the Events a storm drops.
type eventSink struct {
	queue       *eventqueue.Queue
	broadcaster record.EventBroadcaster
	client      kubernetes.Interface
}

// newEventSink sends Events with a client of their own, limited to
// --kube-api-qps/--kube-api-burst when given (shared with the controllers'
// writes, as upstream), else to the kubelet's default --event-qps and
// --event-burst: without a client-side limit on the controllers' writes,
// Events would take a third of the API server's writes while nodes join
// and delay them; a burst of thousands of Events gets the broadcaster's
// queue and drop policy, as upstream's.
func newEventSink(cfg *rest.Config, opts *Options) (*eventSink, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = opts.EventQPS()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for Events: %w", err)
	}
	q, b := eventqueue.New(scheme.Scheme, opts.tenantName())
	return &eventSink{queue: q, broadcaster: b, client: cs}, nil
}

func (e *eventSink) Start(ctx context.Context) error {
	w := e.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: e.client.CoreV1().Events("")})
	e.queue.Run(ctx)
	w.Stop()
	e.broadcaster.Shutdown()
	return nil
}

// Events are written from the start, on every replica: a non-leader records
// none, and a leader's first Events must not wait.
func (e *eventSink) NeedLeaderElection() bool { return false }
