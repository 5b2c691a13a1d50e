package plugintoken

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// DefaultLifetime is the lifetime asked for a token: the kubelet's for a
// projected ServiceAccount token (3607 s, rounded down). The API server may
// grant another (--service-account-max-token-expiration); the Writer plans
// with the one granted.
const DefaultLifetime = time.Hour

// requestTimeout bounds one TokenRequest: a hung API server connection is
// given up and the request retried with backoff.
const requestTimeout = 30 * time.Second

// Options configure a Writer.
type Options struct {
	// ServiceAccount is the plugin's account (required).
	ServiceAccount types.NamespacedName
	// Dir is where the token, ca.crt and namespace are written
	// (required): a directory the plugin's container mounts at
	// /var/run/secrets/kubernetes.io/serviceaccount.
	Dir string
	// Client asks for the tokens, as Outrigger's own identity: it needs
	// `create` on serviceaccounts/token of that one account (required).
	Client typedcorev1.ServiceAccountsGetter
	// CA returns the API server's CA bundle (PEM) the plugin is to trust,
	// Outrigger's own: read again for every token, as the CA file of an
	// in-cluster configuration is rotated in place (required).
	CA func() ([]byte, error)
	// Lifetime asked for each token; 0 is DefaultLifetime.
	Lifetime time.Duration
	// Clock; nil is the real clock.
	Clock clock.Clock
}

// Writer keeps a token of the plugin's ServiceAccount in Options.Dir, from
// start until its context ends, on every replica: a standby's plugin
// answers Outrigger's probes too, and would need its token the moment its
// replica leads. It is a manager Runnable.
type Writer struct {
	opts Options

	mu   sync.Mutex
	last held
}

// New checks opts and fills in the defaults.
func New(opts Options) (*Writer, error) {
	var errs []error
	if opts.ServiceAccount.Namespace == "" || opts.ServiceAccount.Name == "" {
		errs = append(errs, errors.New("no ServiceAccount namespace and name"))
	}
	if opts.Dir == "" {
		errs = append(errs, errors.New("no directory"))
	}
	if opts.Client == nil || opts.CA == nil {
		errs = append(errs, errors.New("no client or CA"))
	}
	if opts.Lifetime < 0 {
		errs = append(errs, errors.New("negative lifetime"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("plugin token writer: %w", err)
	}
	if opts.Lifetime == 0 {
		opts.Lifetime = DefaultLifetime
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Writer{opts: opts}, nil
}

// NeedLeaderElection is false: every replica's plugin gets its token.
func (w *Writer) NeedLeaderElection() bool { return false }

// Start writes a token at once, then replaces it before it expires, until
// ctx ends. A failed request or write is logged, counted and retried with
// backoff; the token written before goes on working until it expires.
func (w *Writer) Start(ctx context.Context) error {
	log := klog.FromContext(ctx).WithValues("serviceAccount", w.opts.ServiceAccount.String(), "dir", w.opts.Dir)
	failures := 0
	for {
		now := w.opts.Clock.Now()
		if wait := nextRequest(now, w.held(), failures).Sub(now); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-w.opts.Clock.After(wait):
			}
		}
		requested := w.opts.Clock.Now()
		lifetime, err := w.refresh(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			failures++
			tokenRequests.WithLabelValues("failed").Inc()
			h := w.held()
			log.Error(err, "Could not replace the plugin's ServiceAccount token; retrying", "failures", failures, "retryIn", backoff(failures),
				"expires", expiresValue(h))
			continue
		}
		failures = 0
		h := held{requested: requested, lifetime: lifetime}
		w.mu.Lock()
		w.last = h
		w.mu.Unlock()
		tokenRequests.WithLabelValues("written").Inc()
		tokenExpiry.WithLabelValues().Set(float64(h.expires().Unix()))
		log.Info("Wrote the plugin's ServiceAccount token", "expires", h.expires().UTC(), "refreshAt", nextRequest(requested, h, 0).UTC())
	}
}

// Ready says whether the directory holds a token that has not expired: a
// replica whose plugin cannot reach the API is not ready (/readyz).
func (w *Writer) Ready() error {
	h := w.held()
	switch {
	case h.lifetime == 0:
		return fmt.Errorf("no token of ServiceAccount %s written to %s yet", w.opts.ServiceAccount, w.opts.Dir)
	case !w.opts.Clock.Now().Before(h.expires()):
		return fmt.Errorf("the token of ServiceAccount %s in %s expired at %s and could not be replaced", w.opts.ServiceAccount, w.opts.Dir, h.expires().UTC().Format(time.RFC3339))
	}
	return nil
}

func (w *Writer) held() held {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// refresh asks for a token and writes the directory; it returns the
// lifetime the API server granted.
func (w *Writer) refresh(ctx context.Context) (time.Duration, error) {
	ca, err := w.opts.CA()
	if err != nil {
		return 0, fmt.Errorf("reading the API server's CA: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	sa := w.opts.ServiceAccount
	// Audiences left empty: the API server's own, which it accepts.
	tr, err := w.opts.Client.ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(w.opts.Lifetime / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("requesting a token of ServiceAccount %s: %w", sa, err)
	}
	if tr.Status.Token == "" {
		return 0, fmt.Errorf("the API server returned an empty token of ServiceAccount %s", sa)
	}
	if err := (apiAccess{token: []byte(tr.Status.Token), ca: ca, namespace: sa.Namespace}).write(w.opts.Dir); err != nil {
		return 0, err
	}
	return granted(tr, w.opts.Clock.Now(), w.opts.Lifetime), nil
}

// granted is the lifetime the API server gave the token: the answer's
// spec.expirationSeconds (set to the one granted, as the kubelet reads it),
// else what is left until its expiration timestamp, else what was asked.
func granted(tr *authenticationv1.TokenRequest, now time.Time, asked time.Duration) time.Duration {
	if s := tr.Spec.ExpirationSeconds; s != nil && *s > 0 {
		return time.Duration(*s) * time.Second
	}
	if exp := tr.Status.ExpirationTimestamp; !exp.IsZero() && exp.After(now) {
		return exp.Sub(now)
	}
	return asked
}

func expiresValue(h held) any {
	if h.lifetime == 0 {
		return "no token yet"
	}
	return h.expires().UTC()
}

var (
	// tokenRequests counts the plugin's tokens asked for, by result.
	tokenRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_plugin_token_requests_total",
		Help: "Tokens of the provider plugin's ServiceAccount (--plugin-service-account) asked for, by result: written (to --plugin-api-access-dir); failed (the request or the write, retried with backoff).",
	}, []string{"result"})
	// tokenExpiry is when the token written last expires: a vector
	// without labels, so that it is absent, not 0, until a token is
	// written (without --plugin-service-account, never).
	tokenExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outrigger_plugin_token_expiry_timestamp_seconds",
		Help: "When the provider plugin's token written last expires (Unix time); replaced at 80 % of its lifetime.",
	}, nil)
)

func init() {
	metrics.Registry.MustRegister(tokenRequests, tokenExpiry)
}
