package manager

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/path"
	"k8s.io/apiserver/pkg/authorization/union"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/outrigger-ccm/outrigger/pkg/accessreview"
)

// The secure port serves what upstream's does, through controller-runtime's
// metrics server: /healthz, /livez and /readyz open to all (kubelet probes
// carry no credentials), /metrics, /configz and /debug/pprof to callers the
// API server authenticates (TokenReview, or a client certificate) and
// authorizes (SubjectAccessReview on the non-resource path), as
// k8s.io/apiserver's delegated authentication and authorization do.

// servingPairName names the self-signed pair written to --cert-dir, as
// upstream's.
const servingPairName = "cloud-controller-manager"

// tlsSettings turns the TLS flags into a tls.Config mutator.
func (s *ServingOptions) tlsSettings() (func(*tls.Config), error) {
	var errs []error
	minVersion, err := cliflag.TLSVersion(s.MinTLSVersion)
	if err != nil {
		errs = append(errs, fmt.Errorf("--tls-min-version: %w", err))
	}
	suites, err := cliflag.TLSCipherSuites(s.CipherSuites)
	if err != nil {
		errs = append(errs, fmt.Errorf("--tls-cipher-suites: %w", err))
	}
	var curves []tls.CurveID
	for _, c := range s.CurvePreferences {
		curves = append(curves, tls.CurveID(c))
	}
	if len(errs) > 0 {
		return nil, oneLine(errs)
	}
	return func(c *tls.Config) {
		if minVersion != 0 {
			c.MinVersion = minVersion
		}
		if len(suites) > 0 {
			c.CipherSuites = suites
		}
		if len(curves) > 0 {
			c.CurvePreferences = curves
		}
		if s.DisableHTTP2 {
			c.NextProtos = []string{"http/1.1"}
		} else if !slices.Contains(c.NextProtos, "h2") {
			c.NextProtos = append([]string{"h2"}, c.NextProtos...)
		}
	}, nil
}

// certificates returns GetCertificate for the serving port: the SNI
// certificates by name, else --tls-cert-file (reloaded when it changes), else
// a self-signed pair in --cert-dir, else one in memory. The runnables keep
// the watched files current.
func (s *ServingOptions) certificates() (func(*tls.ClientHelloInfo) (*tls.Certificate, error), []manager.Runnable, error) {
	var (
		def       func(*tls.ClientHelloInfo) (*tls.Certificate, error)
		runnables []manager.Runnable
	)
	certFile, keyFile := s.CertFile, s.KeyFile
	if certFile == "" && s.CertDir != "" {
		certFile = filepath.Join(s.CertDir, servingPairName+".crt")
		keyFile = filepath.Join(s.CertDir, servingPairName+".key")
		if err := ensureSelfSigned(certFile, keyFile); err != nil {
			return nil, nil, fmt.Errorf("--cert-dir %s: %w", s.CertDir, err)
		}
	}
	if certFile != "" {
		w, err := certwatcher.New(certFile, keyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("loading the serving certificate %s: %w", certFile, err)
		}
		def = w.GetCertificate
		runnables = append(runnables, w)
	} else {
		cert, err := selfSigned()
		if err != nil {
			return nil, nil, err
		}
		def = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil }
	}
	byName := map[string]*tls.Certificate{}
	for _, nck := range s.SNICertKeys {
		cert, err := tls.LoadX509KeyPair(nck.CertFile, nck.KeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--tls-sni-cert-key %s: %w", nck.CertFile, err)
		}
		names := nck.Names
		if len(names) == 0 {
			leaf, err := x509.ParseCertificate(cert.Certificate[0])
			if err != nil {
				return nil, nil, fmt.Errorf("--tls-sni-cert-key %s: %w", nck.CertFile, err)
			}
			names = append(slices.Clone(leaf.DNSNames), leaf.Subject.CommonName)
		}
		for _, n := range names {
			byName[strings.ToLower(n)] = &cert
		}
	}
	return func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if c, ok := byName[strings.ToLower(hello.ServerName)]; ok {
			return c, nil
		}
		return def(hello)
	}, runnables, nil
}

// ensureSelfSigned writes a self-signed pair unless both files exist, as
// upstream does in --cert-dir.
func ensureSelfSigned(certFile, keyFile string) error {
	if _, err := os.Stat(certFile); err == nil {
		if _, err := os.Stat(keyFile); err == nil {
			return nil
		}
	}
	cert, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		return fmt.Errorf("generating a self-signed certificate: %w", err)
	}
	if err := certutil.WriteCert(certFile, cert); err != nil {
		return err
	}
	return os.WriteFile(keyFile, key, 0o600)
}

func selfSigned() (*tls.Certificate, error) {
	cert, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		return nil, fmt.Errorf("generating a self-signed serving certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("loading the self-signed serving certificate: %w", err)
	}
	return &pair, nil
}

// listenConfig honours --permit-address-sharing and --permit-port-sharing.
func (s *ServingOptions) listenConfig() net.ListenConfig {
	return net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if s.PermitAddressSharing {
				serr = errors.Join(serr, unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1))
			}
			if s.PermitPortSharing {
				serr = errors.Join(serr, unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1))
			}
		})
		return errors.Join(err, serr)
	}}
}

// metricsServer maps the serving flags onto controller-runtime's metrics
// server. readyz may gain checks until the manager starts.
func (o *Options) metricsServer(readyz map[string]healthz.Checker) (metricsserver.Options, []manager.Runnable, error) {
	s := o.Serving
	if s.BindPort == 0 {
		return metricsserver.Options{BindAddress: "0"}, nil, nil
	}
	tlsOpt, err := s.tlsSettings()
	if err != nil {
		return metricsserver.Options{}, nil, err
	}
	getCert, runnables, err := s.certificates()
	if err != nil {
		return metricsserver.Options{}, nil, err
	}
	mo := metricsserver.Options{
		BindAddress:   net.JoinHostPort(s.BindAddress.String(), strconv.Itoa(s.BindPort)),
		SecureServing: true,
		ListenConfig:  s.listenConfig(),
		TLSOpts: []func(*tls.Config){tlsOpt, func(c *tls.Config) {
			c.GetCertificate = getCert
			// Client certificates are checked by the authenticator,
			// against --client-ca-file and the front proxies' CA.
			c.ClientAuth = tls.RequestClientCert
		}},
		ExtraHandlers: map[string]http.Handler{},
	}
	live := &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}}
	for p, h := range map[string]http.Handler{"/healthz": live, "/livez": live, "/readyz": &healthz.Handler{Checks: readyz}} {
		// As controller-runtime's probe server mounts them: the handler
		// reads the path below its prefix as a check name.
		mo.ExtraHandlers[p] = http.StripPrefix(p, h)
		mo.ExtraHandlers[p+"/"] = http.StripPrefix(p, h)
	}
	mo.ExtraHandlers["/configz"] = o.configzHandler()
	if o.Profiling {
		mo.ExtraHandlers["/debug/pprof/"] = http.HandlerFunc(pprof.Index)
		mo.ExtraHandlers["/debug/pprof/cmdline"] = http.HandlerFunc(pprof.Cmdline)
		mo.ExtraHandlers["/debug/pprof/profile"] = http.HandlerFunc(pprof.Profile)
		mo.ExtraHandlers["/debug/pprof/symbol"] = http.HandlerFunc(pprof.Symbol)
		mo.ExtraHandlers["/debug/pprof/trace"] = http.HandlerFunc(pprof.Trace)
		if o.ContentionProfiling {
			goruntime.SetBlockProfileRate(1)
			goruntime.SetMutexProfileFraction(1)
		}
	}
	mo.FilterProvider = o.delegatedAuth
	if o.DisableMetricsAuthentication {
		mo.FilterProvider = o.openMetricsOnly
	}
	return mo, runnables, nil
}

// openMetricsOnly is delegatedAuth for every path but /metrics, which
// --disable-metrics-authentication opens: the console, /configz and pprof
// tell far more (and pprof can load the process), so they stay behind
// authentication whatever that flag says.
func (o *Options) openMetricsOnly(main *rest.Config, hc *http.Client) (metricsserver.Filter, error) {
	authed, err := o.delegatedAuth(main, hc)
	if err != nil {
		return nil, err
	}
	return func(log logr.Logger, h http.Handler) (http.Handler, error) {
		withAuth, err := authed(log, h)
		if err != nil {
			return nil, err
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/metrics" {
				h.ServeHTTP(w, r)
				return
			}
			withAuth.ServeHTTP(w, r)
		}), nil
	}, nil
}

// delegatedAuth builds the filter that authenticates and authorizes every
// request but those of --authorization-always-allow-paths.
func (o *Options) delegatedAuth(main *rest.Config, _ *http.Client) (metricsserver.Filter, error) {
	authnConfig, err := kubeconfigOr(o.Authentication.Kubeconfig, main)
	if err != nil {
		return nil, fmt.Errorf("--authentication-kubeconfig: %w", err)
	}
	authzConfig, err := kubeconfigOr(o.Authorization.Kubeconfig, main)
	if err != nil {
		return nil, fmt.Errorf("--authorization-kubeconfig: %w", err)
	}
	authnClient, err := kubernetes.NewForConfig(authnConfig)
	if err != nil {
		return nil, fmt.Errorf("authentication client: %w", err)
	}
	authzClient, err := kubernetes.NewForConfig(authzConfig)
	if err != nil {
		return nil, fmt.Errorf("authorization client: %w", err)
	}
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

	a := o.Authentication
	caSettings, err := a.lookup(authnClient)
	if err != nil {
		return nil, err
	}
	authnCfg := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: true},
		TokenAccessReviewClient:  authnClient.AuthenticationV1(),
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      &backoff,
		CacheTTL:                 a.CacheTTL,
	}
	if len(caSettings.clientCA) > 0 {
		p, err := dynamiccertificates.NewStaticCAContent("client-ca", caSettings.clientCA)
		if err != nil {
			return nil, fmt.Errorf("client CA: %w", err)
		}
		authnCfg.ClientCertificateCAContentProvider = p
	}
	if len(caSettings.requestHeaderCA) > 0 {
		p, err := dynamiccertificates.NewStaticCAContent("request-header-ca", caSettings.requestHeaderCA)
		if err != nil {
			return nil, fmt.Errorf("request header CA: %w", err)
		}
		authnCfg.RequestHeaderConfig = &authenticatorfactory.RequestHeaderConfig{
			CAContentProvider:   p,
			UsernameHeaders:     headerrequest.StaticStringSlice(caSettings.usernames),
			UIDHeaders:          headerrequest.StaticStringSlice(caSettings.uids),
			GroupHeaders:        headerrequest.StaticStringSlice(caSettings.groups),
			ExtraHeaderPrefixes: headerrequest.StaticStringSlice(caSettings.extraPrefixes),
			AllowedClientNames:  headerrequest.StaticStringSlice(caSettings.allowedNames),
		}
	}
	authn, _, err := authnCfg.New()
	if err != nil {
		return nil, fmt.Errorf("delegated authentication: %w", err)
	}

	paths, err := path.NewAuthorizer(o.Authorization.AlwaysAllowPaths)
	if err != nil {
		return nil, fmt.Errorf("--authorization-always-allow-paths: %w", err)
	}
	sar := accessreview.New(accessreview.Options{
		Reviews:  authzClient.AuthorizationV1().SubjectAccessReviews(),
		AllowTTL: o.Authorization.AllowCacheTTL,
		DenyTTL:  o.Authorization.DenyCacheTTL,
		Backoff:  backoff,
	})
	// As upstream: the always-allowed paths, then system:masters, then
	// the API server's answer.
	authz, err := union.New(
		union.NamedAuthorizer{AuthorizerName: "always-allow-paths", Authorizer: paths},
		union.NamedAuthorizer{AuthorizerName: "privileged-groups", Authorizer: accessreview.PrivilegedGroups("system:masters")},
		union.NamedAuthorizer{AuthorizerName: "webhook", Authorizer: sar.Authorizer()})
	if err != nil {
		return nil, fmt.Errorf("delegated authorization: %w", err)
	}

	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if o.alwaysAllowed(r.URL.Path) {
				next.ServeHTTP(w, r)
				return
			}
			resp, ok, err := authn.AuthenticateRequest(r)
			if err != nil || !ok {
				if err != nil {
					log.V(2).Info("Authentication failed", "path", r.URL.Path, "err", err)
				}
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
				return
			}
			attrs := authorizer.AttributesRecord{User: resp.User, Verb: strings.ToLower(r.Method), Path: r.URL.Path}
			decision, reason, err := authz.Authorize(r.Context(), attrs)
			if err != nil {
				log.Error(err, "Authorization failed", "path", r.URL.Path, "user", resp.User.GetName())
			}
			if decision != authorizer.DecisionAllow {
				msg := fmt.Sprintf("Forbidden: user %q cannot %s path %q", resp.User.GetName(), attrs.Verb, r.URL.Path)
				if reason != "" {
					msg += ": " + reason
				}
				http.Error(w, msg, http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
		}), nil
	}, nil
}

// alwaysAllowed reports whether path is served to anyone; as upstream's
// path authorizer, a trailing * matches a prefix. A health endpoint allowed
// also opens its individual checks (/readyz/informer-sync), which upstream
// leaves to RBAC: they tell no more than the endpoint itself.
func (o *Options) alwaysAllowed(p string) bool {
	for _, allowed := range o.Authorization.AlwaysAllowPaths {
		prefix, wildcard := strings.CutSuffix(allowed, "*")
		switch {
		case p == allowed, wildcard && strings.HasPrefix(p, prefix):
			return true
		case slices.Contains([]string{"/healthz", "/livez", "/readyz"}, allowed) && strings.HasPrefix(p, allowed+"/"):
			return true
		}
	}
	return false
}

// caSettings are the client certificate and front-proxy settings, from the
// flags or, as upstream, from kube-system/extension-apiserver-authentication.
type caSettings struct {
	clientCA, requestHeaderCA                            []byte
	usernames, uids, groups, extraPrefixes, allowedNames []string
}

// lookup reads the CAs from the flags, filling what they leave empty from the
// ConfigMap the API server publishes, unless --authentication-skip-lookup.
func (a *AuthenticationOptions) lookup(client kubernetes.Interface) (caSettings, error) {
	s := caSettings{
		usernames: a.RequestHeaderUsernames, uids: a.RequestHeaderUIDs, groups: a.RequestHeaderGroups,
		extraPrefixes: a.RequestHeaderExtraPrefixes, allowedNames: a.RequestHeaderAllowedNames,
	}
	var err error
	if a.ClientCAFile != "" {
		if s.clientCA, err = os.ReadFile(a.ClientCAFile); err != nil {
			return s, fmt.Errorf("--client-ca-file: %w", err)
		}
	}
	if a.RequestHeaderClientCAFile != "" {
		if s.requestHeaderCA, err = os.ReadFile(a.RequestHeaderClientCAFile); err != nil {
			return s, fmt.Errorf("--requestheader-client-ca-file: %w", err)
		}
	}
	if a.SkipLookup || (a.ClientCAFile != "" && a.RequestHeaderClientCAFile != "") {
		return s, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cm, err := client.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return s, nil
	case err != nil && a.TolerateLookupFailure:
		klog.Background().Info("Could not read kube-system/extension-apiserver-authentication; callers are authenticated by token only", "err", err)
		return s, nil
	case err != nil:
		return s, fmt.Errorf("reading kube-system/extension-apiserver-authentication (grant the extension-apiserver-authentication-reader Role, or pass --authentication-tolerate-lookup-failure or --authentication-skip-lookup): %w", err)
	}
	if a.ClientCAFile == "" {
		s.clientCA = []byte(cm.Data["client-ca-file"])
	}
	if a.RequestHeaderClientCAFile == "" && cm.Data["requestheader-client-ca-file"] != "" {
		s.requestHeaderCA = []byte(cm.Data["requestheader-client-ca-file"])
		for key, dst := range map[string]*[]string{
			"requestheader-username-headers":     &s.usernames,
			"requestheader-uid-headers":          &s.uids,
			"requestheader-group-headers":        &s.groups,
			"requestheader-extra-headers-prefix": &s.extraPrefixes,
			"requestheader-allowed-names":        &s.allowedNames,
		} {
			if v := cm.Data[key]; v != "" {
				var list []string
				if err := json.Unmarshal([]byte(v), &list); err != nil {
					return s, fmt.Errorf("kube-system/extension-apiserver-authentication %s: %w", key, err)
				}
				*dst = list
			}
		}
	}
	return s, nil
}

func kubeconfigOr(path string, main *rest.Config) (*rest.Config, error) {
	if path == "" {
		return rest.CopyConfig(main), nil
	}
	return clientcmd.BuildConfigFromFlags("", path)
}

// configzHandler serves the effective configuration under upstream's key,
// with upstream's section names where upstream has the setting.
func (o *Options) configzHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		enabled, _ := o.EnabledControllers()
		cfg := map[string]any{"cloudcontrollermanager": map[string]any{
			"kind":       "CloudControllerManagerConfiguration",
			"apiVersion": "cloudcontrollermanager.config.k8s.io/v1alpha1",
			"Generic": map[string]any{
				"Port": o.Serving.BindPort, "Address": o.Serving.BindAddress.String(),
				"MinResyncPeriod":         o.MinResyncPeriod.String(),
				"ClientConnection":        map[string]any{"ContentType": o.KubeAPIContentType, "QPS": o.APIQPS(), "Burst": o.APIBurst()},
				"ControllerStartInterval": o.ControllerStartInterval.String(),
				"LeaderElection": map[string]any{
					"LeaderElect": o.LeaderElect, "LeaseDuration": o.LeaderElectLeaseDuration.String(),
					"RenewDeadline": o.LeaderElectRenewDeadline.String(), "RetryPeriod": o.LeaderElectRetryPeriod.String(),
					"ResourceLock": o.LeaderElectResourceLock, "ResourceName": o.LeaderElectResourceName,
					"ResourceNamespace": o.LeaderElectResourceNamespace,
				},
				"Controllers": o.Controllers, "EnabledControllers": enabled,
				"Debugging":              map[string]any{"EnableProfiling": o.Profiling, "EnableContentionProfiling": o.ContentionProfiling},
				"LeaderMigrationEnabled": o.EnableLeaderMigration,
			},
			"KubeCloudShared": map[string]any{
				"CloudProvider":                map[string]any{"Name": o.CloudProvider, "CloudConfigFile": o.CloudConfig},
				"UseServiceAccountCredentials": o.UseServiceAccountCredentials,
				"AllowUntaggedCloud":           o.AllowUntaggedCloud,
				"RouteReconciliationPeriod":    o.RouteReconciliationPeriod.String(),
				"NodeMonitorPeriod":            o.NodeMonitorPeriod.String(),
				"ClusterName":                  o.ClusterName, "ClusterCIDR": o.ClusterCIDR,
				"AllocateNodeCIDRs": o.AllocateNodeCIDRs, "CIDRAllocatorType": o.CIDRAllocatorType,
				"ConfigureCloudRoutes": o.ConfigureCloudRoutes,
			},
			"ServiceController":         map[string]any{"ConcurrentServiceSyncs": o.ServiceWorkers()},
			"NodeController":            map[string]any{"ConcurrentNodeSyncs": o.NodeWorkers(), "ConcurrentNodeStatusUpdates": o.StatusUpdateWorkers()},
			"NodeLifecycleController":   map[string]any{"ConcurrentNodeSyncs": o.LifecycleWorkers()},
			"NodeStatusUpdateFrequency": o.NodeStatusUpdateFrequency.String(),
			"Outrigger": map[string]any{
				"LoadBalancerClass": o.LoadBalancerClass, "CloudQPS": o.CloudQPS, "CloudBurst": o.CloudBurst,
				"CloudCallTimeout":     o.CloudCallTimeout.String(),
				"NodeCIDRMaskSizeIPv4": o.NodeCIDRMaskSizeIPv4, "NodeCIDRMaskSizeIPv6": o.NodeCIDRMaskSizeIPv6,
			},
		}}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(cfg)
	})
}
