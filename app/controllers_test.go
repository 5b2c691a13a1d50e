//go:build integration

package app_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/fake"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
	genericcontrollermanager "k8s.io/controller-manager/app"
	"k8s.io/controller-manager/controller"

	"github.com/outrigger-ccm/outrigger/app"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/pkg/manager"
)

// TestProviderControllers runs a provider's main in process with three
// controllers of its own beside Outrigger's: one that panics and one that
// fails are reported by name (log and Event) while Outrigger's node
// controller and the third, which watches nodes through the shared
// informers, go on; one disabled by default never starts.
func TestProviderControllers(t *testing.T) {
	var (
		mu       sync.Mutex
		seen     = map[string]bool{}
		optional bool
		cluster  string
	)
	constructors := maps.Clone(app.DefaultInitFuncConstructors)
	extra := func(f func(ctx context.Context, cc genericcontrollermanager.ControllerContext) (bool, error)) app.ControllerInitFuncConstructor {
		return app.ControllerInitFuncConstructor{
			InitContext: app.ControllerInitContext{ClientName: "extra"},
			Constructor: func(_ app.ControllerInitContext, cfg *config.CompletedConfig, _ cloudprovider.Interface) app.InitFunc {
				return func(ctx context.Context, cc genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
					ok, err := f(ctx, cc)
					return nil, ok, err
				}
			},
		}
	}
	constructors["boom"] = extra(func(context.Context, genericcontrollermanager.ControllerContext) (bool, error) {
		panic("the provider's controller panicked")
	})
	constructors["broken"] = extra(func(context.Context, genericcontrollermanager.ControllerContext) (bool, error) {
		return false, errors.New("no credentials for the tagging API")
	})
	constructors["watcher"] = extra(func(ctx context.Context, cc genericcontrollermanager.ControllerContext) (bool, error) {
		inf := cc.InformerFactory.Core().V1().Nodes().Informer()
		_, err := inf.AddEventHandler(handler(func(n *corev1.Node) {
			mu.Lock()
			defer mu.Unlock()
			seen[n.Name] = true
		}))
		return true, err
	})
	constructors["optional"] = extra(func(context.Context, genericcontrollermanager.ControllerContext) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		optional = true
		return true, nil
	})
	app.ControllersDisabledByDefault.Insert("optional")
	defer app.ControllersDisabledByDefault.Delete("optional")

	s, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	cloudInit := func(c *config.CompletedConfig) cloudprovider.Interface {
		mu.Lock()
		cluster = c.ComponentConfig.KubeCloudShared.ClusterName
		mu.Unlock()
		return &fake.Cloud{EnableInstancesV2: true, ExistsByProviderID: true, DisableRoutes: true, DisableLoadBalancers: true,
			ExternalIP: net.ParseIP("198.18.100.1"),
			OverrideInstanceMetadata: func(_ context.Context, n *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
				return &cloudprovider.InstanceMetadata{ProviderID: "fake://" + n.Name,
					NodeAddresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.100.11"}}}, nil
			}}
	}
	stop := make(chan struct{})
	lease := testenv.Name("extras")
	cmd := app.NewCloudControllerManagerCommand(s, cloudInit, constructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, stop)
	cmd.SetArgs([]string{"--cloud-provider=fake", "--kubeconfig=" + testenv.Kubeconfig, "--cluster-name=extras-cluster",
		"--leader-elect-resource-name=" + lease, "--secure-port=0"})
	done := make(chan error, 1)
	go func() { done <- cmd.Execute() }()
	defer func() {
		close(stop)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("command: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the command did not stop")
		}
	}()

	// The command sets up klog's global logger first: nothing here logs
	// until it has reached the cloud initializer, past that.
	testenv.Eventually(t, 30*time.Second, "the cloud initializer called", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return cluster != "", nil
	})
	node := testenv.Name("extras-node")
	testenv.CreateNode(t, node, nil)
	testenv.Eventually(t, 60*time.Second, "the node initialized and seen by the provider's watcher", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return seen[node] && testenv.GetNode(t, node).Spec.ProviderID == "fake://"+node, nil
	})
	testenv.Eventually(t, 30*time.Second, "ControllerFailed Events naming both failed controllers", func() (bool, error) {
		var msgs []string
		for _, e := range testenv.Events(t, lease)[manager.ReasonControllerFailed] {
			msgs = append(msgs, e.Message)
		}
		all := strings.Join(msgs, "\n")
		return strings.Contains(all, "boom failed to start: panic: the provider's controller panicked") &&
			strings.Contains(all, "broken failed to start: no credentials for the tagging API"), fmt.Errorf("events: %q", msgs)
	})
	mu.Lock()
	defer mu.Unlock()
	if optional {
		t.Error("a controller disabled by default started without being named")
	}
	if cluster != "extras-cluster" {
		t.Errorf("the cloud initializer saw cluster name %q, want the flag's", cluster)
	}
}

type handler func(*corev1.Node)

func (h handler) OnAdd(obj any, _ bool) {
	if n, ok := obj.(*corev1.Node); ok {
		h(n)
	}
}
func (h handler) OnUpdate(_, obj any) { h.OnAdd(obj, false) }
func (h handler) OnDelete(any)        {}
