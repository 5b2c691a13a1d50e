// Reading the Gateway data planes' metrics: their pods listed by label,
// each pod's /metrics fetched through the API server's pod proxy, so that
// the console needs no route to the pods and RBAC decides. Reads are
// cached, bounded and never awaited by a page.

package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

const (
	// trafficFresh is how long a Gateway's read serves every page and
	// view before the next: open pages poll, and must not multiply the
	// scrapes.
	trafficFresh = 5 * time.Second
	// trafficForget is how long a Gateway no snapshot has shown is still
	// read again: past it, nobody is looking.
	trafficForget = time.Minute
	// scrapeTimeout bounds one pod list or one pod's scrape, including
	// the wait for a slot: a pod that does not answer costs its Gateway
	// this much, and nothing more.
	scrapeTimeout = 3 * time.Second
	// maxPodsPerGateway bounds the pods read for one Gateway: a data plane
	// of many replicas is shown as the sum of the first of them.
	maxPodsPerGateway = 8
	// maxTrafficGateways bounds the Gateways read for one snapshot: its
	// 200 rows at 8 pods each would be 1,600 scrapes every trafficFresh
	// through the API server. A filter brings others into the first.
	maxTrafficGateways = 50
	// maxScrapes bounds the scrapes in flight over all Gateways (each
	// goes through the API server).
	maxScrapes = 8
	// maxScrapeBytes bounds one pod's exposition: the data plane's series
	// are per port and route, far below this.
	maxScrapeBytes = 4 << 20
	// managedByLabel marks what Outrigger made (the gateway controller's
	// label; its own constant is unexported).
	managedByLabel = "app.kubernetes.io/managed-by"
)

// podLister lists the pods of namespace the selector picks.
type podLister func(ctx context.Context, namespace, selector string) ([]corev1.Pod, error)

// podScraper returns one pod's /metrics.
type podScraper func(ctx context.Context, namespace, pod string) ([]byte, error)

// trafficReader keeps each Gateway's last read, by Gateway UID, and
// reads again in the background when a snapshot asks for one older than
// trafficFresh.
type trafficReader struct {
	list    podLister
	scrape  podScraper
	clock   clock.PassiveClock
	log     logr.Logger
	changed func() // called after each read, so the pages get it
	life    context.Context
	timeout time.Duration
	slots   chan struct{} // maxScrapes

	mu      sync.Mutex
	entries map[string]*trafficEntry
	reads   sync.WaitGroup // tests wait on it
}

type trafficEntry struct {
	namespace, selector string
	listeners           []Listener
	last                *GatewayTraffic       // nil until the first read ends
	pods                map[string]podFigures // of the last read, by pod UID
	reading             bool
	asked               time.Time // when a snapshot last showed it
}

func newTrafficReader(life context.Context, client kubernetes.Interface, c clock.PassiveClock, log logr.Logger, changed func()) *trafficReader {
	return &trafficReader{
		list: func(ctx context.Context, namespace, selector string) ([]corev1.Pod, error) {
			// ResourceVersion 0: the API server's watch cache answers.
			l, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: "0"})
			if err != nil {
				return nil, err
			}
			return l.Items, nil
		},
		scrape:  proxyScraper(client),
		clock:   c,
		log:     log,
		changed: changed,
		life:    life,
		timeout: scrapeTimeout,
		slots:   make(chan struct{}, maxScrapes),
		entries: map[string]*trafficEntry{},
	}
}

// ReadGatewayTraffic reads at once the data plane of the Gateway with uid
// whose pods run in namespace, as the Gateways view does in the background
// (without rates, which take two reads). The real-cluster test reads
// through it: a real API server, kubelet and data plane pod, under
// Outrigger's own RBAC.
func ReadGatewayTraffic(ctx context.Context, client kubernetes.Interface, uid, namespace string) *GatewayTraffic {
	t := newTrafficReader(ctx, client, clock.RealClock{}, logr.Discard(), nil)
	out, _ := t.read(ctx, uid, namespace, trafficSelector(uid), nil, nil, time.Time{})
	return out
}

// trafficSelector picks the data plane pods of the Gateway with uid.
func trafficSelector(uid string) string {
	return labels.SelectorFromSet(labels.Set{managedByLabel: "outrigger", gateway.GatewayUIDLabel: uid}).String()
}

// proxyScraper fetches a pod's /metrics on the data plane's health port
// through the API server (pods/proxy): get on pods/proxy is all it needs,
// and a refusal is the API server's 403.
func proxyScraper(client kubernetes.Interface) podScraper {
	return func(ctx context.Context, namespace, pod string) ([]byte, error) {
		rw := client.CoreV1().Pods(namespace).ProxyGet("http", pod, strconv.Itoa(dataplane.HealthPort), "metrics", nil)
		if rw == nil {
			// A fake clientset without a proxy reactor.
			return nil, errors.New("no pod proxy")
		}
		body, err := rw.Stream(ctx)
		if err != nil {
			return nil, err
		}
		defer body.Close()
		data, err := io.ReadAll(io.LimitReader(body, maxScrapeBytes+1))
		if err != nil {
			return nil, err
		}
		if len(data) > maxScrapeBytes {
			return nil, fmt.Errorf("more than %d bytes of metrics", maxScrapeBytes)
		}
		return data, nil
	}
}

// attach sets the Traffic of each Outrigger Gateway of gws from its last
// read, starting a read in the background for those with none fresh. It
// never waits for one: a page shows the last figures, and the next
// snapshot the new ones.
func (t *trafficReader) attach(gws []Gateway) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	read := 0
	for i := range gws {
		g := &gws[i]
		if !g.Outrigger || g.uid == "" {
			continue
		}
		if g.dataPlaneNamespace != "" {
			read++
		}
		switch {
		case read > maxTrafficGateways:
			g.Traffic = &GatewayTraffic{Namespace: g.dataPlaneNamespace,
				Reason: fmt.Sprintf("only the data planes of the first %d Outrigger Gateways shown are read; filter to read this one's", maxTrafficGateways)}
			continue
		case g.dataPlaneNamespace == "":
			// No load balancer Service: either not made yet, or the
			// provider's own load balancers serve the Gateway and
			// Outrigger runs no data plane for it.
			g.Traffic = &GatewayTraffic{Reason: "no data plane found: Outrigger has made no load balancer Service for this Gateway (not yet, or the provider's own load balancer serves it)"}
			continue
		}
		e := t.entries[g.uid]
		if e == nil || e.namespace != g.dataPlaneNamespace {
			e = &trafficEntry{namespace: g.dataPlaneNamespace, selector: trafficSelector(g.uid)}
			t.entries[g.uid] = e
		}
		e.asked = now
		e.listeners = slices.Clone(g.Listeners)
		if e.last != nil {
			c := *e.last
			g.Traffic = &c
		} else {
			g.Traffic = &GatewayTraffic{Namespace: e.namespace, Reason: "the first read is under way"}
		}
		t.startLocked(g.uid, e, now)
	}
}

// refresh reads again the Gateways shown within trafficForget whose read
// is stale, and forgets the others: while a page is open, its figures
// move without anything else changing.
func (t *trafficReader) refresh() {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for uid, e := range t.entries {
		if now.Sub(e.asked) > trafficForget {
			if !e.reading {
				delete(t.entries, uid)
			}
			continue
		}
		t.startLocked(uid, e, now)
	}
}

// startLocked starts reading e unless a read is under way or fresh.
func (t *trafficReader) startLocked(uid string, e *trafficEntry, now time.Time) {
	if e.reading || (e.last != nil && now.Sub(e.last.ReadAt) < trafficFresh) {
		return
	}
	e.reading = true
	namespace, selector, listeners := e.namespace, e.selector, e.listeners
	var prev map[string]podFigures
	var prevAt time.Time
	if e.last != nil {
		prev, prevAt = e.pods, e.last.ReadAt
	}
	// One goroutine per Gateway: one whose pods do not answer delays
	// no other's.
	t.reads.Go(func() {
		traffic, pods := t.read(t.life, uid, namespace, selector, listeners, prev, prevAt)
		t.mu.Lock()
		if cur := t.entries[uid]; cur == e {
			e.last, e.pods, e.reading = traffic, pods, false
		}
		t.mu.Unlock()
		if t.changed != nil {
			t.changed()
		}
	})
}

// read lists a Gateway's data plane pods and scrapes the ready ones, at
// most maxPodsPerGateway, concurrently.
func (t *trafficReader) read(ctx context.Context, uid, namespace, selector string, listeners []Listener,
	prev map[string]podFigures, prevAt time.Time) (*GatewayTraffic, map[string]podFigures) {
	log := t.log.WithValues("gatewayUID", uid, "namespace", namespace)
	out := &GatewayTraffic{Namespace: namespace, Listeners: []TrafficRow{}, Routes: []TrafficRow{}}
	lctx, cancel := context.WithTimeout(ctx, t.timeout)
	pods, err := t.list(lctx, namespace, selector)
	cancel()
	out.ReadAt = t.clock.Now()
	if err != nil {
		out.Reason = "listing its pods: " + whyNotRead(err, "list pods", t.timeout)
		log.V(4).Info("Could not list a Gateway's data plane pods", "err", err)
		return out, nil
	}
	out.PodsFound = len(pods)
	if len(pods) == 0 {
		out.Reason = fmt.Sprintf("no data plane pods labelled %s in namespace %s", selector, namespace)
		return out, nil
	}
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
	// Failed scrapes are listed first, then pods not ready, then those
	// beyond the cap: the list is cut at maxPodsPerGateway, and the first
	// are what someone looks for.
	var failed, notReady, beyond []PodNotRead
	var scrape []corev1.Pod
	for _, p := range pods {
		switch {
		case p.DeletionTimestamp != nil:
			notReady = append(notReady, PodNotRead{Pod: p.Name, Reason: "pod terminating"})
		case !podReady(&p):
			notReady = append(notReady, PodNotRead{Pod: p.Name, Reason: "pod not ready (" + string(p.Status.Phase) + ")"})
		case len(scrape) >= maxPodsPerGateway:
			beyond = append(beyond, PodNotRead{Pod: p.Name, Reason: fmt.Sprintf("beyond the %d pods read per Gateway", maxPodsPerGateway)})
		default:
			scrape = append(scrape, p)
		}
	}
	type result struct {
		read podRead
		err  error
	}
	results := make([]result, len(scrape))
	var wg sync.WaitGroup
	for i, p := range scrape {
		wg.Go(func() {
			text, err := t.scrapeOne(ctx, namespace, p.Name)
			if err == nil {
				var f podFigures
				if f, err = parsePodMetrics(text); err != nil {
					err = fmt.Errorf("%w: %w", errUnreadable, err)
				}
				results[i] = result{read: podRead{uid: string(p.UID), figures: f}}
			}
			results[i].err = err
		})
	}
	wg.Wait()
	var read []podRead
	figures := map[string]podFigures{}
	for i, r := range results {
		if r.err != nil {
			failed = append(failed, PodNotRead{Pod: scrape[i].Name, Reason: whyNotRead(r.err, "get pods/proxy", t.timeout)})
			log.V(4).Info("Could not read a Gateway data plane pod's metrics", "pod", scrape[i].Name, "err", r.err)
			continue
		}
		read = append(read, r.read)
		figures[r.read.uid] = r.read.figures
	}
	var seconds float64
	if len(prev) > 0 {
		seconds = out.ReadAt.Sub(prevAt).Seconds()
	}
	aggregateTraffic(out, read, prev, seconds, listeners)
	notRead := slices.Concat(failed, notReady, beyond)
	if len(notRead) > maxPodsPerGateway {
		out.NotReadMore = len(notRead) - maxPodsPerGateway
		notRead = notRead[:maxPodsPerGateway]
	}
	out.NotRead = notRead
	return out, figures
}

// errUnreadable marks an answer that was not a data plane's metrics.
var errUnreadable = errors.New("metrics unreadable")

// scrapeOne scrapes one pod within the timeout, its wait for a slot
// included.
func (t *trafficReader) scrapeOne(ctx context.Context, namespace, pod string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	select {
	case t.slots <- struct{}{}:
		defer func() { <-t.slots }()
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for one of the %d scrape slots: %w", maxScrapes, ctx.Err())
	}
	return t.scrape(ctx, namespace, pod)
}

// podReady says whether a pod is running and ready: a data plane not
// ready is not programmed yet, or draining, and its figures would mislead.
func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// whyNotRead says in a few words why a list or scrape (right: the verb
// and resource it takes) failed: RBAC refused (naming the right), timed
// out, or the error.
func whyNotRead(err error, right string, timeout time.Duration) string {
	switch {
	case apierrors.IsForbidden(err):
		return "RBAC refused (" + right + "): " + err.Error()
	case errors.Is(err, context.DeadlineExceeded) || apierrors.IsTimeout(err):
		return fmt.Sprintf("timed out after %s: %v", timeout, err)
	case errors.Is(err, errUnreadable):
		return err.Error()
	default:
		return right + " failed: " + err.Error()
	}
}
