package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/outrigger-ccm/outrigger/internal/plugintoken"
)

// serviceAccountRef is a flag naming a ServiceAccount as NAMESPACE/NAME,
// parsed when given. The namespace is never implied: Outrigger's own is not
// known outside a pod (--kubeconfig), and a token minted in the wrong
// namespace would be another account's.
type serviceAccountRef struct{ types.NamespacedName }

func (r *serviceAccountRef) String() string {
	if r.Name == "" {
		return ""
	}
	return r.NamespacedName.String()
}

func (r *serviceAccountRef) Type() string { return "namespace/name" }

func (r *serviceAccountRef) Set(s string) error {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" {
		return fmt.Errorf("%q: want NAMESPACE/NAME", s)
	}
	var msgs []string
	for _, m := range validation.IsDNS1123Label(ns) {
		msgs = append(msgs, "namespace: "+m)
	}
	for _, m := range validation.IsDNS1123Subdomain(name) {
		msgs = append(msgs, "name: "+m)
	}
	if len(msgs) > 0 {
		return fmt.Errorf("%q: %s", s, strings.Join(msgs, "; "))
	}
	r.NamespacedName = types.NamespacedName{Namespace: ns, Name: name}
	return nil
}

// validatePluginToken checks that the plugin's account and directory come
// together.
func (o *Options) validatePluginToken() []error {
	sa, dir := o.PluginServiceAccount.Name != "", o.PluginAPIAccessDir != ""
	var errs []error
	if sa != dir {
		errs = append(errs, errors.New("--plugin-service-account and --plugin-api-access-dir go together: the plugin's token is written into that directory"))
	}
	if sa && o.tenantMode() {
		errs = append(errs, errors.New("--plugin-service-account does not go with tenant mode: a plugin's token is of one cluster's ServiceAccount"))
	}
	return errs
}

// writePluginToken keeps a token of --plugin-service-account in
// --plugin-api-access-dir on every replica (package plugintoken), and makes
// the replica unready while none that works is there.
func (b *build) writePluginToken(ctx context.Context) error {
	if b.opts.PluginServiceAccount.Name == "" {
		return nil
	}
	ca, err := caOf(b.restConfig)
	if err != nil {
		return fmt.Errorf("--plugin-service-account: %w", err)
	}
	core, err := kubernetes.NewForConfig(b.restConfig)
	if err != nil {
		return fmt.Errorf("the plugin token's client: %w", err)
	}
	w, err := plugintoken.New(plugintoken.Options{
		ServiceAccount: b.opts.PluginServiceAccount.NamespacedName,
		Dir:            b.opts.PluginAPIAccessDir,
		Client:         core.CoreV1(),
		CA:             ca,
	})
	if err != nil {
		return err
	}
	b.readyz["plugin-token"] = func(*http.Request) error { return w.Ready() }
	return b.mgr.Add(w)
}

// caOf is the CA bundle Outrigger trusts the API server by, for the plugin
// to trust it by too: the file read again each time (an in-cluster CA is
// rotated in place), or the bytes of a kubeconfig.
func caOf(cfg *rest.Config) (func() ([]byte, error), error) {
	switch {
	case cfg.CAFile != "":
		file := cfg.CAFile
		return func() ([]byte, error) { return os.ReadFile(file) }, nil
	case len(cfg.CAData) > 0:
		data := cfg.CAData
		return func() ([]byte, error) { return data, nil }, nil
	}
	return nil, errors.New("the API connection of Outrigger names no CA of its own (a kubeconfig's certificate-authority, or the in-cluster ca.crt) to hand the plugin")
}
