//go:build integration

package manager_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outrigger-ccm/outrigger/internal/freeport"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestSecurePortAsUpstream checks the secure port as a Prometheus scraper
// and an operator use it: health open to all, /metrics, /configz and
// /debug/pprof only to callers the API server authenticates (a
// ServiceAccount token, through TokenReview) and authorizes
// (SubjectAccessReview on the path), served with the self-signed
// certificate written to --cert-dir.
func TestSecurePortAsUpstream(t *testing.T) {
	certDir := t.TempDir()
	// Held for Outrigger until it binds it (with SO_REUSEPORT).
	port := freeport.Reserve(t)
	cloud := testenv.StartCloud(t)
	testenv.StartOutrigger(t, cloud, "--secure-port="+strconv.Itoa(port), "--bind-address=127.0.0.1", "--permit-port-sharing",
		"--cert-dir="+certDir, "--profiling=true")

	reader := newServiceAccount(t, testenv.Name("scraper"), []string{"/metrics", "/configz", "/debug/*"})
	nobody := newServiceAccount(t, testenv.Name("nobody"), nil)

	pemBytes, err := os.ReadFile(filepath.Join(certDir, "cloud-controller-manager.crt"))
	if err != nil {
		t.Fatalf("--cert-dir holds no self-signed certificate: %v", err)
	}
	block, _ := pem.Decode(pemBytes)
	written, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	var served *x509.Certificate
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			served = cs.PeerCertificates[0]
			return nil
		},
	}}}
	base := "https://127.0.0.1:" + strconv.Itoa(port)
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	testenv.Eventually(t, 30*time.Second, "the secure port", func() (bool, error) {
		code, _ := get("/healthz", "")
		return code == http.StatusOK, nil
	})
	if !served.Equal(written) {
		t.Error("the port does not serve the certificate written to --cert-dir")
	}

	tests := []struct {
		path, token string
		want        int
		contains    string
	}{
		{"/healthz", "", http.StatusOK, "ok"},
		{"/livez", "", http.StatusOK, "ok"},
		{"/metrics", "", http.StatusForbidden, ""},
		{"/metrics", "not-a-token", http.StatusUnauthorized, ""},
		{"/metrics", nobody, http.StatusForbidden, ""},
		{"/metrics", reader, http.StatusOK, "outrigger_cloud_calls_total"},
		{"/configz", reader, http.StatusOK, `"cloudcontrollermanager"`},
		{"/configz", nobody, http.StatusForbidden, ""},
		{"/debug/pprof/", reader, http.StatusOK, "goroutine"},
		{"/debug/pprof/", nobody, http.StatusForbidden, ""},
	}
	for _, tc := range tests {
		who := map[string]string{"": "anonymous", "not-a-token": "a bad token", nobody: "an unauthorized account", reader: "an authorized account"}[tc.token]
		t.Run(tc.path+" as "+who, func(t *testing.T) {
			code, body := get(tc.path, tc.token)
			if code != tc.want || !strings.Contains(body, tc.contains) {
				t.Errorf("got %d %.200q, want %d containing %q", code, body, tc.want, tc.contains)
			}
		})
	}
	_, body := get("/configz", reader)
	var cz map[string]map[string]any
	if err := json.Unmarshal([]byte(body), &cz); err != nil || cz["cloudcontrollermanager"]["kind"] != "CloudControllerManagerConfiguration" {
		t.Errorf("/configz: %v %.300s", err, body)
	}
}

// newServiceAccount makes a ServiceAccount allowed GET on paths (none:
// authenticated but allowed nothing) and returns a token for it.
func newServiceAccount(t *testing.T, name string, paths []string) string {
	t.Helper()
	ctx := context.Background()
	c := testenv.Client
	if _, err := c.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(paths) > 0 {
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules: []rbacv1.PolicyRule{{NonResourceURLs: paths, Verbs: []string{"get"}}}}
		if _, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: "default"}}}
		if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
			_ = c.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
		})
	}
	t.Cleanup(func() { _ = c.CoreV1().ServiceAccounts("default").Delete(ctx, name, metav1.DeleteOptions{}) })
	tok, err := c.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}

// --disable-metrics-authentication opens /metrics and nothing else: the
// console, /configz and pprof still authenticate their callers.
func TestDisableMetricsAuthenticationOpensMetricsOnly(t *testing.T) {
	port := freeport.Reserve(t)
	testenv.StartOutrigger(t, testenv.StartCloud(t), "--secure-port="+strconv.Itoa(port), "--bind-address=127.0.0.1", "--permit-port-sharing",
		"--profiling=true", "--disable-metrics-authentication")
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(path string) int {
		resp, err := hc.Get("https://127.0.0.1:" + strconv.Itoa(port) + path)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	testenv.Eventually(t, 30*time.Second, "the secure port", func() (bool, error) { return get("/healthz") == http.StatusOK, nil })
	for path, want := range map[string]int{
		"/metrics":      http.StatusOK,
		"/configz":      http.StatusForbidden,
		"/debug/pprof/": http.StatusForbidden,
		"/console/":     http.StatusForbidden,
	} {
		if got := get(path); got != want {
			t.Errorf("anonymous GET %s: %d, want %d", path, got, want)
		}
	}
}
