//go:build integration

package app_test

import (
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/outrigger-ccm/outrigger/app"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// unset are the fields of upstream's Config (and of its Authentication
// and Authorization) that are nil, by dotted name.
func unset(c *config.Config) map[string]bool {
	out := map[string]bool{}
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		for i := range v.NumField() {
			f, name := v.Field(i), prefix+v.Type().Field(i).Name
			switch f.Kind() {
			case reflect.Pointer, reflect.Interface, reflect.Func, reflect.Map, reflect.Slice:
				if f.IsNil() {
					out[name] = true
				}
			case reflect.Struct:
				if name == "Authentication" || name == "Authorization" {
					walk(name+".", f)
				}
			}
		}
	}
	walk("", reflect.ValueOf(c).Elem())
	return out
}

// TestCompletedConfigAsUpstream: the CompletedConfig a provider's cloud
// initializer gets has every field upstream's Config, built from the same
// flags, has: the secure port's SecureServing (the listener Outrigger
// serves on), Authentication and Authorization, the clients and the
// ClientBuilder.
func TestCompletedConfigAsUpstream(t *testing.T) {
	port := freePort(t)
	flags := []string{"--kubeconfig=" + testenv.Kubeconfig, "--bind-address=127.0.0.1",
		"--authentication-kubeconfig=" + testenv.Kubeconfig, "--authorization-kubeconfig=" + testenv.Kubeconfig}

	// Upstream's, on a port of its own.
	us, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	nfs := us.Flags(app.ControllerNames(app.DefaultInitFuncConstructors), app.ControllersDisabledByDefault.List(), names.CCMControllerAliases(), app.AllWebhooks, app.DisabledByDefaultWebhooks)
	fs := pflag.NewFlagSet("upstream", pflag.ContinueOnError)
	for _, f := range nfs.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(append(flags, "--cloud-provider=config-check", "--secure-port="+strconv.Itoa(freePort(t)))); err != nil {
		t.Fatal(err)
	}
	theirs, err := us.Config(app.ControllerNames(app.DefaultInitFuncConstructors), app.ControllersDisabledByDefault.List(), names.CCMControllerAliases(), app.AllWebhooks, app.DisabledByDefaultWebhooks)
	if err != nil {
		t.Fatal(err)
	}
	if theirs.SecureServing != nil {
		theirs.SecureServing.Listener.Close()
	}
	want := unset(theirs)

	s, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		got map[string]bool
	)
	cloudInit := func(c *config.CompletedConfig) cloudprovider.Interface {
		mu.Lock()
		defer mu.Unlock()
		got = unset(c.Config)
		return fakeCloud()
	}
	stop := make(chan struct{})
	cmd := app.NewCloudControllerManagerCommand(s, cloudInit, app.DefaultInitFuncConstructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, stop)
	ended := startCommand(t, cmd, stop, append(flags, "--cloud-provider=config-check", "--secure-port="+strconv.Itoa(port))...)
	testenv.Eventually(t, 60*time.Second, "the cloud initializer called", func() (bool, error) {
		if done, err := ended(); done {
			t.Fatalf("the command ended: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		return got != nil, nil
	})
	mu.Lock()
	defer mu.Unlock()
	for name := range got {
		if !want[name] {
			t.Errorf("the initializer's CompletedConfig has %s nil; upstream's has it", name)
		}
	}
	t.Logf("nil in upstream's Config too: %v", want)
}
