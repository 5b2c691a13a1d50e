//go:build integration

package app_test

import (
	"context"
	"errors"
	"maps"
	"sync/atomic"
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
)

// TestDigitalOceanShapedMain is a main of DigitalOcean's shape: its cloud's
// HasClusterID is false and its manifest passes no --allow-untagged-cloud;
// it adds a controller of its own to the default ones. It runs: nodes
// initialized, a load balancer provisioned, its controller started.
func TestDigitalOceanShapedMain(t *testing.T) {
	s, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	var ownStarted atomic.Bool
	constructors := maps.Clone(app.DefaultInitFuncConstructors)
	constructors["do-resources"] = extra(func(context.Context, genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
		ownStarted.Store(true)
		return nil, true, nil
	})
	cloudInit := func(*config.CompletedConfig) cloudprovider.Interface {
		cloud := fakeCloud()
		cloud.DisableLoadBalancers = false
		return untagged{cloud}
	}
	stop := make(chan struct{})
	cmd := app.NewCloudControllerManagerCommand(s, cloudInit, constructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, stop)
	ended := startCommand(t, cmd, stop, "--cloud-provider=digitalocean")
	waitInitialized(t, ended)
	waitLoadBalancer(t)
	testenv.Eventually(t, 30*time.Second, "do-resources started", func() (bool, error) { return ownStarted.Load(), nil })
}

// slowLB is a cloud whose EnsureLoadBalancer waits on the cloud's work
// request, as OCI's and OpenStack's do (minutes there, seconds here), and
// records whether its context carried a deadline.
type slowLB struct {
	*fake.Cloud
	took        time.Duration
	hadDeadline atomic.Bool
}

func (c *slowLB) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c, true }

func (c *slowLB) EnsureLoadBalancer(ctx context.Context, cluster string, svc *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	if _, ok := ctx.Deadline(); ok {
		c.hadDeadline.Store(true)
	}
	select {
	case <-time.After(c.took):
	case <-ctx.Done():
		return nil, errors.New("work request abandoned: " + ctx.Err().Error())
	}
	return c.Cloud.EnsureLoadBalancer(ctx, cluster, svc, nodes)
}

// TestOCIShapedMain is a main of OCI's (and OpenStack's) shape as far as
// the call layer sees it: load balancer calls that wait on the cloud's
// work requests. Under a provider's main the default leaves them without a
// deadline, as upstream's app.Run: the load balancer is provisioned and no
// call's context had a deadline (Outrigger's own binary cuts at 30 s).
func TestOCIShapedMain(t *testing.T) {
	s, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	inner := fakeCloud()
	inner.DisableLoadBalancers = false
	cloud := &slowLB{Cloud: inner, took: 3 * time.Second}
	cloudInit := func(*config.CompletedConfig) cloudprovider.Interface { return cloud }
	stop := make(chan struct{})
	cmd := app.NewCloudControllerManagerCommand(s, cloudInit, app.DefaultInitFuncConstructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, stop)
	ended := startCommand(t, cmd, stop, "--cloud-provider=oci")
	waitInitialized(t, ended)
	waitLoadBalancer(t)
	if cloud.hadDeadline.Load() {
		t.Error("a load balancer call had a deadline under the provider's main, where upstream sets none")
	}
}
