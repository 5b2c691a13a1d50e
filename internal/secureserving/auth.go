package secureserving

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/path"
	"k8s.io/apiserver/pkg/authorization/union"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/outrigger-ccm/outrigger/internal/accessreview"
)

// delegated authenticates and authorizes the callers of the secure port
// through the API server, as k8s.io/apiserver's delegated authentication and
// authorization do: a client certificate or a token (TokenReview), then a
// SubjectAccessReview on the non-resource path.
type delegated struct {
	alwaysAllow []string
	authn       authenticator.Request
	authz       authorizer.Authorizer
	// caFiles are the CA files to watch while the port serves.
	caFiles []dynamiccertificates.ControllerRunner
}

// newDelegated builds the authenticator and authorizer, reading the client
// CAs from the API server unless the flags give them.
func newDelegated(ctx context.Context, o *Options, main *rest.Config) (*delegated, error) {
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
	cas, err := a.lookup(ctx, authnClient)
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
	var watched []dynamiccertificates.ControllerRunner
	if len(cas.clientCA) > 0 {
		p, runner, err := caContent("client-ca", a.ClientCAFile, cas.clientCA)
		if err != nil {
			return nil, fmt.Errorf("client CA: %w", err)
		}
		authnCfg.ClientCertificateCAContentProvider = p
		if runner != nil {
			watched = append(watched, runner)
		}
	}
	if len(cas.requestHeaderCA) > 0 {
		p, runner, err := caContent("request-header-ca", a.RequestHeaderClientCAFile, cas.requestHeaderCA)
		if err != nil {
			return nil, fmt.Errorf("request header CA: %w", err)
		}
		if runner != nil {
			watched = append(watched, runner)
		}
		authnCfg.RequestHeaderConfig = &authenticatorfactory.RequestHeaderConfig{
			CAContentProvider:   p,
			UsernameHeaders:     headerrequest.StaticStringSlice(cas.usernames),
			UIDHeaders:          headerrequest.StaticStringSlice(cas.uids),
			GroupHeaders:        headerrequest.StaticStringSlice(cas.groups),
			ExtraHeaderPrefixes: headerrequest.StaticStringSlice(cas.extraPrefixes),
			AllowedClientNames:  headerrequest.StaticStringSlice(cas.allowedNames),
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
	return &delegated{alwaysAllow: o.Authorization.AlwaysAllowPaths, authn: authn, authz: authz, caFiles: watched}, nil
}

// caContent is a CA bundle for the authenticator: read again whenever the
// file changes (as upstream's --client-ca-file, so that a CA rotation is no
// restart), or, when it came from the API server's ConfigMap, the bytes read
// there. The runner, when there is one, must run for the file to be watched.
func caContent(name, file string, pem []byte) (dynamiccertificates.CAContentProvider, dynamiccertificates.ControllerRunner, error) {
	if file == "" {
		p, err := dynamiccertificates.NewStaticCAContent(name, pem)
		return p, nil, err
	}
	p, err := dynamiccertificates.NewDynamicCAContentFromFile(name, file)
	if err != nil {
		return nil, nil, err
	}
	return p, p, nil
}

// watchCAFiles keeps the CA files current until ctx ends: each is checked
// when the file changes and once a minute.
func (d *delegated) watchCAFiles(ctx context.Context) {
	for _, r := range d.caFiles {
		go r.Run(ctx, 1)
	}
}

// wrap serves next to the callers the API server authenticates and
// authorizes, and to anyone on --authorization-always-allow-paths.
func (d *delegated) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.alwaysAllowed(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		log := klog.FromContext(r.Context())
		resp, ok, err := d.authn.AuthenticateRequest(r)
		if err != nil || !ok {
			if err != nil {
				log.V(2).Info("Authentication failed", "path", r.URL.Path, "err", err)
			}
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		attrs := authorizer.AttributesRecord{User: resp.User, Verb: strings.ToLower(r.Method), Path: r.URL.Path}
		decision, reason, err := d.authz.Authorize(r.Context(), attrs)
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
	})
}

// alwaysAllowed reports whether path is served to anyone; as upstream's
// path authorizer, a trailing * matches a prefix. A health endpoint allowed
// also opens its individual checks (/readyz/informer-sync), which upstream
// leaves to RBAC: they tell no more than the endpoint itself.
func (d *delegated) alwaysAllowed(p string) bool {
	for _, allowed := range d.alwaysAllow {
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
func (a *AuthenticationOptions) lookup(ctx context.Context, client kubernetes.Interface) (caSettings, error) {
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
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cm, err := client.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return s, nil
	case err != nil && a.TolerateLookupFailure:
		klog.FromContext(ctx).Info("Could not read kube-system/extension-apiserver-authentication; callers are authenticated by token only", "err", err)
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
	cfg := rest.CopyConfig(main)
	if path != "" {
		var err error
		if cfg, err = clientcmd.BuildConfigFromFlags("", path); err != nil {
			return nil, fmt.Errorf("loading %s: %w", path, err)
		}
	}
	// As k8s.io/apiserver's delegated authentication and authorization:
	// whoever reaches the port makes at most this many reviews a second
	// of the API server, whatever they send.
	cfg.QPS, cfg.Burst = DelegatedQPS, DelegatedBurst
	return cfg, nil
}

// DelegatedQPS and DelegatedBurst bound the TokenReviews and
// SubjectAccessReviews the secure port sends, each, as upstream's
// delegated clients do.
const (
	DelegatedQPS   = 200
	DelegatedBurst = 400
)
