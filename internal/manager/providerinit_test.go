package manager

import (
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// TestAProviderIsRefusedTheAccountOfAControllerThatReadsSecrets: with
// --use-service-account-credentials a provider's client builder hands out
// the ServiceAccount each name asks for, but not gateway-controller's,
// whose account reads Secrets for the controller's own work: Config and
// Client fail saying why, the OrDie forms panic with it, and nothing is
// asked of the API server.
func TestAProviderIsRefusedTheAccountOfAControllerThatReadsSecrets(t *testing.T) {
	if secretReaders["gateway-controller"] == "" {
		t.Fatalf("secretReaders %v lack gateway-controller", secretReaders)
	}
	opts := NewOptions()
	opts.UseServiceAccountCredentials = true
	// An address nothing answers on: a request would fail, not pass.
	p := &providerInit{config: &rest.Config{Host: "https://127.0.0.1:1"}, opts: opts}
	b := p.clientBuilder()
	const want = "kube-system/gateway-controller: it is the gateway-controller's account, which reads Secrets"
	if _, err := b.Config("gateway-controller"); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Config: err = %v, want %q", err, want)
	}
	if _, err := b.Client("gateway-controller"); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Client: err = %v, want %q", err, want)
	}
	for name, f := range map[string]func(){
		"ConfigOrDie": func() { b.ConfigOrDie("gateway-controller") },
		"ClientOrDie": func() { b.ClientOrDie("gateway-controller") },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(error).Error(), want) {
					t.Errorf("%s: recovered %v, want a panic saying %q", name, r, want)
				}
			}()
			f()
		}()
	}

	// Without --use-service-account-credentials the provider gets
	// Outrigger's own identity, as upstream: no name is minted.
	opts.UseServiceAccountCredentials = false
	if _, err := p.clientBuilder().Config("gateway-controller"); err != nil {
		t.Errorf("Config without service account credentials: %v", err)
	}
}
