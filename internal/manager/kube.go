package manager

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// restConfig is the API server's configuration: a provider's main's, the
// tenant's, or from --kubeconfig and --master (in-cluster without them),
// with the client's limits and content type from the flags.
func restConfig(opts *Options) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if ext := opts.Extension; ext != nil && ext.RestConfig != nil {
		// Upstream's config, built by the provider's main: its QPS, burst,
		// content type and user agent are the main's.
		return rest.CopyConfig(ext.RestConfig), nil
	}
	if t := opts.tenant; t != nil {
		// The tenant's API server, from its kubeconfig Secret or file.
		cfg = rest.CopyConfig(t.restConfig)
	} else if opts.Kubeconfig == "" && opts.Master == "" {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig or --master given and not running in a cluster: %w", err)
		}
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags(opts.Master, opts.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("loading --kubeconfig %q: %w", opts.Kubeconfig, err)
		}
	}
	cfg.QPS = opts.APIQPS()
	cfg.Burst = opts.APIBurst()
	// Left at upstream's default (protobuf), Outrigger talks JSON, which
	// measured faster for its client (docs/performance.md); given, the
	// flag is honoured.
	if opts.changed("kube-api-content-type") {
		cfg.ContentType = opts.KubeAPIContentType
	}
	cfg.UserAgent = "outrigger"
	return cfg, nil
}

// managerOptions maps the flags onto controller-runtime's manager. Its
// probe and metrics servers are off: the secure port serves both.
func managerOptions(opts *Options) manager.Options {
	return manager.Options{
		Logger:                        withCleanStop(ctrl.Log.WithName("manager")),
		LeaderElection:                opts.LeaderElect,
		LeaderElectionID:              opts.LeaderElectResourceName,
		LeaderElectionNamespace:       opts.LeaderElectResourceNamespace,
		LeaderElectionResourceLock:    opts.LeaderElectResourceLock,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptr.To(opts.LeaderElectLeaseDuration),
		RenewDeadline:                 ptr.To(opts.LeaderElectRenewDeadline),
		RetryPeriod:                   ptr.To(opts.LeaderElectRetryPeriod),
		// Controllers are named as upstream's; several managers in one
		// process (tests, `outrigger dev`) reuse the names.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Cache: cache.Options{
			DefaultTransform: stripUnread,
			SyncPeriod:       ptr.To(opts.MinResyncPeriod),
		},
		HealthProbeBindAddress: "0",
		Metrics:                metricsserver.Options{BindAddress: "0"},
	}
}

// clientBuilder gives providers the API clients upstream's Initialize hands
// them, all from the manager's configuration.
type clientBuilder struct{ cfg *rest.Config }

func (b clientBuilder) Config(name string) (*rest.Config, error) {
	cfg := rest.CopyConfig(b.cfg)
	cfg.UserAgent = "outrigger/" + name
	return cfg, nil
}

func (b clientBuilder) ConfigOrDie(name string) *rest.Config {
	cfg, _ := b.Config(name)
	return cfg
}

func (b clientBuilder) Client(name string) (kubernetes.Interface, error) {
	cfg, _ := b.Config(name)
	return kubernetes.NewForConfig(cfg)
}

func (b clientBuilder) ClientOrDie(name string) kubernetes.Interface {
	c, err := b.Client(name)
	if err != nil {
		panic(fmt.Errorf("building client %s: %w", name, err))
	}
	return c
}

var _ cloudprovider.ControllerClientBuilder = clientBuilder{}

// stripUnread drops from cached objects what no controller reads, a good
// part of the cache's memory at thousands of nodes: managedFields, and a
// node's list of container images (up to 50 entries a kubelet reports by
// default, often the largest part of a node). Controllers only ever patch
// nodes, with diffs between two cached or copied objects, so what is dropped
// here is never written back.
func stripUnread(obj any) (any, error) {
	obj, err := stripManagedFields(obj)
	if err != nil {
		return obj, err
	}
	if node, ok := obj.(*corev1.Node); ok {
		node.Status.Images = nil
	}
	return obj, nil
}

var stripManagedFields = cache.TransformStripManagedFields()
