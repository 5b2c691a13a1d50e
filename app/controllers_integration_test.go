//go:build integration

package app_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiserverhealthz "k8s.io/apiserver/pkg/server/healthz"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
	genericcontrollermanager "k8s.io/controller-manager/app"
	"k8s.io/controller-manager/controller"
	controllerhealthz "k8s.io/controller-manager/pkg/healthz"

	"github.com/outrigger-ccm/outrigger/app"
	"github.com/outrigger-ccm/outrigger/internal/manager"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// extra is a provider controller whose InitFunc is f.
func extra(f func(ctx context.Context, cc genericcontrollermanager.ControllerContext) (controller.Interface, bool, error)) app.ControllerInitFuncConstructor {
	return app.ControllerInitFuncConstructor{
		InitContext: app.ControllerInitContext{ClientName: "extra"},
		Constructor: func(app.ControllerInitContext, *config.CompletedConfig, cloudprovider.Interface) app.InitFunc {
			return f
		},
	}
}

// unhealthy is a provider controller that reports itself unhealthy.
type unhealthy struct{}

func (unhealthy) Name() string { return "watcher" }
func (unhealthy) HealthChecker() controllerhealthz.UnnamedHealthChecker {
	return apiserverhealthz.NamedCheck("any", func(*http.Request) error { return errors.New("lost its watch") })
}

// TestProviderControllers runs a provider's main in process with
// controllers of its own beside Outrigger's, as upstream's app runs them:
// one watching nodes through the shared informers, whose health check
// (controller.HealthCheckable) is /healthz/watcher; one disabled by
// default that the provider's own --controllers default enables; and
// Outrigger's lifecycle controller, which the provider put in
// ControllersDisabledByDefault, left out by '*'.
func TestProviderControllers(t *testing.T) {
	var (
		mu       sync.Mutex
		seen     = map[string]bool{}
		optional bool
		cluster  string
	)
	constructors := maps.Clone(app.DefaultInitFuncConstructors)
	constructors["watcher"] = extra(func(ctx context.Context, cc genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
		inf := cc.InformerFactory.Core().V1().Nodes().Informer()
		_, err := inf.AddEventHandler(handler(func(n *corev1.Node) {
			mu.Lock()
			defer mu.Unlock()
			seen[n.Name] = true
		}))
		return unhealthy{}, true, err
	})
	constructors["optional"] = extra(func(context.Context, genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		optional = true
		return nil, true, nil
	})
	app.ControllersDisabledByDefault.Insert("optional", names.CloudNodeLifecycleController)
	defer app.ControllersDisabledByDefault.Delete("optional", names.CloudNodeLifecycleController)

	s, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	s.Generic.Controllers = []string{"*", "optional"}
	cloudInit := func(c *config.CompletedConfig) cloudprovider.Interface {
		mu.Lock()
		cluster = c.ComponentConfig.KubeCloudShared.ClusterName
		mu.Unlock()
		return fakeCloud()
	}
	stop := make(chan struct{})
	cmd := app.NewCloudControllerManagerCommand(s, cloudInit, constructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, stop)
	port := testenv.FreePort(t)
	ended := startCommand(t, cmd, stop, "--cloud-provider=fake", "--cluster-name=extras-cluster",
		fmt.Sprintf("--secure-port=%d", port), "--bind-address=127.0.0.1", "--cert-dir="+t.TempDir())

	node := testenv.Name("extras-node")
	testenv.CreateNode(t, node, nil)
	testenv.Eventually(t, 60*time.Second, "the node initialized and seen by the provider's watcher", func() (bool, error) {
		if done, err := ended(); done {
			t.Fatalf("the command ended: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		return seen[node] && testenv.GetNode(t, node).Spec.ProviderID == "fake://"+node, nil
	})
	health := func(check string) int {
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the port's self-signed certificate
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz/%s", port, check))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	testenv.Eventually(t, 30*time.Second, "the watcher's health check served, failing", func() (bool, error) {
		return health("watcher") == http.StatusInternalServerError, nil
	})
	for check, want := range map[string]int{
		names.CloudNodeController: http.StatusOK, "optional": http.StatusOK,
		names.CloudNodeLifecycleController: http.StatusNotFound,
	} {
		if got := health(check); got != want {
			t.Errorf("/healthz/%s: %d, want %d", check, got, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !optional {
		t.Error("the provider's --controllers default did not start a controller disabled by default")
	}
	if cluster != "extras-cluster" {
		t.Errorf("the cloud initializer saw cluster name %q, want the flag's", cluster)
	}
}

// TestFailedInitFuncStops: a provider controller whose InitFunc fails or
// panics stops the command with an error naming it, as upstream's process
// exits, after a ControllerFailed Event on the Lease.
func TestFailedInitFuncStops(t *testing.T) {
	for _, tc := range []struct {
		name string
		init func(context.Context, genericcontrollermanager.ControllerContext) (controller.Interface, bool, error)
		want string
	}{
		{"broken", func(context.Context, genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
			return nil, false, errors.New("no credentials for the tagging API")
		}, "broken failed to start: no credentials for the tagging API"},
		{"boom", func(context.Context, genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
			panic("the provider's controller panicked")
		}, "boom failed to start: panic: the provider's controller panicked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			constructors := maps.Clone(app.DefaultInitFuncConstructors)
			constructors[tc.name] = extra(tc.init)
			s, err := options.NewCloudControllerManagerOptions()
			if err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			cmd := app.NewCloudControllerManagerCommand(s, func(*config.CompletedConfig) cloudprovider.Interface { return fakeCloud() },
				constructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, stop)
			lease := testenv.Name("failed")
			ended := startCommand(t, cmd, stop, "--cloud-provider=fake", "--leader-elect-resource-name="+lease)
			var cmdErr error
			testenv.Eventually(t, 60*time.Second, "the command stopped", func() (bool, error) {
				done, err := ended()
				cmdErr = err
				return done, nil
			})
			if cmdErr == nil || !strings.Contains(cmdErr.Error(), tc.want) {
				t.Errorf("the command's error: %v, want %q", cmdErr, tc.want)
			}
			testenv.Eventually(t, 30*time.Second, "a ControllerFailed Event naming it", func() (bool, error) {
				for _, e := range testenv.Events(t, lease)[manager.ReasonControllerFailed] {
					if strings.Contains(e.Message, tc.want) {
						return true, nil
					}
				}
				return false, nil
			})
		})
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
