//go:build integration

package manager_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/outrigger-ccm/outrigger/internal/plugintoken"
	"github.com/outrigger-ccm/outrigger/internal/poll"
	"github.com/outrigger-ccm/outrigger/internal/testclock"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// pluginClient is what a plugin's rest.InClusterConfig builds from the
// directory mounted at /var/run/secrets/kubernetes.io/serviceaccount: the
// token file (re-read by client-go), the CA file, the API server's address
// (from the pod's environment; here the test API server's).
func pluginClient(t testing.TB, dir string) kubernetes.Interface {
	t.Helper()
	cfg := &rest.Config{
		Host:            testenv.Config.Host,
		BearerTokenFile: filepath.Join(dir, plugintoken.TokenFile),
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(dir, plugintoken.CAFile)},
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

// whoAmI is the user the API server authenticates c as.
func whoAmI(t testing.TB, c kubernetes.Interface) string {
	t.Helper()
	r, err := c.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	return r.Status.UserInfo.Username
}

// pluginNamespace makes a namespace with the plugin's ServiceAccount and a
// Secret in it.
func pluginNamespace(t *testing.T) (ns string) {
	t.Helper()
	ctx := context.Background()
	ns = testenv.Name("plugin-token")
	c := testenv.Client
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "acme-plugin"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tls-cert"}, StringData: map[string]string{"tls.key": "private"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// TestThePluginActsAsItsOwnServiceAccountAndCannotReadSecrets: with
// --plugin-service-account, Outrigger writes a token, the CA and the
// namespace into --plugin-api-access-dir; a client built from those files,
// as rest.InClusterConfig builds the plugin's, is authenticated as the
// plugin's ServiceAccount and refused a Secret that Outrigger's own
// identity reads.
func TestThePluginActsAsItsOwnServiceAccountAndCannotReadSecrets(t *testing.T) {
	ctx := context.Background()
	ns := pluginNamespace(t)
	dir := t.TempDir()
	testenv.StartOutrigger(t, testenv.StartCloud(t), "--plugin-service-account="+ns+"/acme-plugin", "--plugin-api-access-dir="+dir)
	poll.Eventually(t, 30*time.Second, "the plugin's token", func() (bool, error) {
		_, err := os.Stat(filepath.Join(dir, plugintoken.TokenFile))
		return err == nil, err
	})
	if b, err := os.ReadFile(filepath.Join(dir, plugintoken.NamespaceFile)); err != nil || string(b) != ns {
		t.Errorf("namespace file %q (%v), want %s", b, err, ns)
	}
	plugin := pluginClient(t, dir)
	if got, want := whoAmI(t, plugin), "system:serviceaccount:"+ns+":acme-plugin"; got != want {
		t.Errorf("the plugin is %s, want %s", got, want)
	}
	if _, err := testenv.Client.CoreV1().Secrets(ns).Get(ctx, "tls-cert", metav1.GetOptions{}); err != nil {
		t.Fatalf("Outrigger's own identity cannot read the Secret either (the test proves nothing): %v", err)
	}
	if _, err := plugin.CoreV1().Secrets(ns).Get(ctx, "tls-cert", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the plugin's Secret read: err = %v, want Forbidden", err)
	}
}

// TestTheChartsGrantMintsOnlyThePluginsTokenAndItIsReplaced: the writer
// acting as an account holding the chart's grant (create on
// serviceaccounts/token of the plugin's account, by name) and, as
// Outrigger's does, Secret reads, writes a working token, replaces it once
// 80 % of its lifetime has passed on its clock with another that works
// too, and cannot mint one for any other account of the namespace; the
// plugin's token does not carry its minter's Secret reads.
func TestTheChartsGrantMintsOnlyThePluginsTokenAndItIsReplaced(t *testing.T) {
	ctx := context.Background()
	ns := pluginNamespace(t)
	c := testenv.Client
	for _, sa := range []string{"ccm", "other"} {
		if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The chart's grant, and the gateway-controller's Secret reads
	// Outrigger's account holds beside it.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "plugin-token", Namespace: ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{"acme-plugin"}, Verbs: []string{"create"},
	}, {
		APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"},
	}}}
	if _, err := c.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "plugin-token", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "plugin-token"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "ccm", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(testenv.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":ccm"}
	ccm := kubernetes.NewForConfigOrDie(cfg)
	// RBAC's cache may lag the binding: wait for the grant to hold.
	poll.Eventually(t, 30*time.Second, "the chart's grant to take effect", func() (bool, error) {
		_, err := ccm.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "acme-plugin", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		return err == nil, err
	})
	if _, err := ccm.CoreV1().Secrets(ns).Get(ctx, "tls-cert", metav1.GetOptions{}); err != nil {
		t.Fatalf("Outrigger's account cannot read the Secret (the test proves nothing): %v", err)
	}
	if _, err := ccm.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "other", &authenticationv1.TokenRequest{}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("minting another account's token: err = %v, want Forbidden", err)
	}

	dir := t.TempDir()
	clk := testclock.New(time.Now())
	w, err := plugintoken.New(plugintoken.Options{
		ServiceAccount: types.NamespacedName{Namespace: ns, Name: "acme-plugin"},
		Dir:            dir,
		Client:         ccm.CoreV1(),
		CA:             func() ([]byte, error) { return testenv.Config.CAData, nil },
		Clock:          clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Start(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	token := func() string {
		b, _ := os.ReadFile(filepath.Join(dir, plugintoken.TokenFile))
		return string(b)
	}
	poll.Until(t, 30*time.Second, "the first token", func() bool { return token() != "" && clk.HasWaiters() })
	first := token()
	if got := whoAmI(t, pluginClient(t, dir)); got != "system:serviceaccount:"+ns+":acme-plugin" {
		t.Errorf("the first token is %s's", got)
	}
	clk.Step(48 * time.Minute)
	poll.Until(t, 30*time.Second, "the token replaced after 48 minutes", func() bool { return token() != first && clk.HasWaiters() })
	// A client built now reads the new token.
	if got := whoAmI(t, pluginClient(t, dir)); got != "system:serviceaccount:"+ns+":acme-plugin" {
		t.Errorf("the second token is %s's", got)
	}
	if _, err := pluginClient(t, dir).CoreV1().Secrets(ns).Get(ctx, "tls-cert", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the plugin's Secret read: err = %v, want Forbidden, though the account that minted its token reads it", err)
	}
	if err := w.Ready(); err != nil {
		t.Errorf("Ready: %v", err)
	}
}
