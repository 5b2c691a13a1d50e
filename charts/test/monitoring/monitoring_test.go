// Package monitoring holds the chart's alerts and dashboard to the metrics
// Outrigger really serves: it runs Outrigger against a real kube-apiserver
// and etcd (internal/testenv) and the sim cloud, scrapes its /metrics as
// Prometheus does (HTTPS, a ServiceAccount token), keeps every sample as a
// Prometheus would, and evaluates each alert of the chart's PrometheusRule
// and each query of its Grafana dashboard with Prometheus's PromQL engine:
// first while all is well, then under faults it provokes (a node the cloud
// does not know, a load balancer quota, a throttling cloud, a hanging
// cloud, the Lease taken by another holder).
package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/spf13/pflag"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	charttest "github.com/outrigger-ccm/outrigger/charts/test"
	"github.com/outrigger-ccm/outrigger/internal/manager"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// job is the label the scrape gives every series, as a Prometheus scrape
// job does; the dashboard's $job variable selects it.
const job = "outrigger"

// lease is Outrigger's default leader-election Lease, which the alerts name.
const lease = "cloud-controller-manager"

const uninitialized = "node.cloudprovider.kubernetes.io/uninitialized"

// firesUnder names, for each alert, the fault under which the test shows
// its condition holding (the checkpoint it is evaluated at). Every alert of
// the chart must be here, and none may hold while all is well.
var firesUnder = map[string]string{
	"OutriggerNoLeader":                "lease taken",
	"OutriggerLeaderChangesFrequent":   "", // needs more than three hand-overs within the hour
	"OutriggerNodesUninitialized":      "", // needs a node uninitialized for ten minutes; its gauge is checked under "failing"
	"OutriggerLoadBalancerSyncFailing": "failing",
	"OutriggerCloudThrottling":         "throttled",
	"OutriggerCloudErrors":             "throttled",
	"OutriggerCloudCallsHung":          "hung",
	"OutriggerCloudFamilyDegraded":     "hung",
}

func TestAlertsAndDashboardAgainstScrape(t *testing.T) {
	objs := renderMonitoring(t)
	alerts := chartAlerts(t, objs)
	queries := dashboardQueries(t, objs)
	checkRunbooks(t, alerts)
	for _, a := range alerts {
		if _, ok := firesUnder[a.Alert]; !ok {
			t.Errorf("alert %s: no fault of this test is said to make it fire (firesUnder)", a.Alert)
		}
	}

	ctx := context.Background()
	cloud := testenv.StartCloud(t)
	if err := cloud.SetInternalIPv4Range(netip.MustParsePrefix("198.19.200.0/24")); err != nil {
		t.Fatal(err)
	}
	a, b := testenv.Name("mon-a"), testenv.Name("mon-b")
	for _, n := range []string{a, b} {
		if _, err := cloud.Create(simcloud.CreateRequest{Name: n}); err != nil {
			t.Fatal(err)
		}
		testenv.CreateNode(t, n, nil)
	}
	svcs := []string{createLBService(t)}
	if err := testenv.Client.CoordinationV1().Leases("kube-system").Delete(ctx, lease, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}

	port := testenv.FreePort(t)
	base := "https://127.0.0.1:" + strconv.Itoa(port)
	flags := []string{
		"--secure-port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--cert-dir=" + t.TempDir(),
		"--leader-elect=true", "--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
		"--allocate-node-cidrs", "--cluster-cidr=198.18.64.0/18", "--route-reconciliation-period=500ms",
		"--cloud-call-timeout=1s",
	}
	hang := &gate{}
	t.Cleanup(hang.release)
	first := startOutrigger(t, cloud, hang, flags...)
	sc := startScraper(t, base+"/metrics", scraperToken(t))
	at := map[string]time.Time{}

	// All well: nodes initialized and routed, the load balancer provisioned.
	testenv.Eventually(t, 60*time.Second, "nodes initialized, routes and a load balancer", func() (bool, error) {
		for _, n := range []string{a, b} {
			node := testenv.GetNode(t, n)
			if node.Spec.ProviderID == "" || slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == uninitialized }) {
				return false, fmt.Errorf("node %s not initialized", n)
			}
		}
		svc, err := testenv.Client.CoreV1().Services("default").Get(ctx, svcs[0], metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if len(svc.Status.LoadBalancer.Ingress) != 1 {
			return false, fmt.Errorf("service %s has no ingress", svc.Name)
		}
		if len(cloud.Routes()) != 2 {
			return false, fmt.Errorf("routes %v", cloud.Routes())
		}
		return true, nil
	})
	healthy := sc.after(t, 3, "three scrapes of a healthy Outrigger", nil)
	waitLeaseEvent(t, "LeaderElection")

	// Work that fails over and over: a Ready node the cloud does not know
	// (it stays uninitialized), a load balancer quota that leaves four
	// Services without one, and a NotReady node the lifecycle controller
	// asks the cloud about.
	testenv.CreateNode(t, testenv.Name("mon-unknown"), nil)
	cloud.SetSettings(simcloud.Settings{MaxLoadBalancers: 1})
	for range 4 {
		svcs = append(svcs, createLBService(t))
	}
	testenv.SetReady(t, b, false)
	at["failing"] = sc.after(t, 1, "repeated node and load balancer failures, lifecycle checks", func(s scrape) bool {
		return s.sum("outrigger_nodes_uninitialized", "controller", "cloud-node-controller") >= 1 &&
			s.sum("controller_runtime_reconcile_errors_total", "controller", "cloud-node-controller") >= 2 &&
			s.sum("controller_runtime_reconcile_errors_total", "controller", "service-lb-controller") >= 4 &&
			s.sum("cloud_node_lifecycle_controller_cloud_provider_calls_total", "", "") > 0
	})

	// A cloud that accepts one call a second and throttles the rest.
	cloud.SetSettings(simcloud.Settings{MaxLoadBalancers: 1, RateLimit: 1, RateBurst: 1, RetryAfter: simcloud.Duration{Duration: time.Second}})
	at["throttled"] = sc.after(t, 1, "throttled calls, held calls and a family slowed down", func(s scrape) bool {
		return s.sum("outrigger_cloud_throttled_total", "", "") >= 20 &&
			s.has("outrigger_cloud_calls_held_total") && s.has("outrigger_cloud_family_slowdowns_total")
	})
	cloud.SetSettings(simcloud.Settings{MaxLoadBalancers: 1})

	// A provider hung in EnsureLoadBalancer, ignoring its context, for
	// the Services still waiting for a load balancer, sixteen new ones
	// among them: Outrigger abandons each call at its timeout, refuses
	// the Services' retries while their call still runs, and /readyz fails.
	hang.hang()
	for range 16 {
		svcs = append(svcs, createLBService(t))
	}
	at["hung"] = sc.after(t, 1, "hung calls, refused retries", func(s scrape) bool {
		return s.sum("outrigger_cloud_abandoned_calls", "method", "EnsureLoadBalancer") >= 16 &&
			s.sum("outrigger_cloud_calls_in_flight_rejected_total", "", "") > 0 &&
			s.sum("outrigger_cloud_call_timeouts_total", "", "") >= 16
	})
	if code, body := get(t, base+"/readyz"); code == http.StatusOK {
		t.Errorf("/readyz answers 200 with 16 hung load balancer calls: %s", body)
	}
	waitLeaseEvent(t, "CloudCallsDegraded")
	hang.release()
	waitLeaseEvent(t, "CloudCallsRecovered")

	// Another holder takes the Lease: the leader cannot renew and exits, as
	// Outrigger does; started again, as its kubelet would, it stays a
	// standby.
	takeLease(t, "someone-else")
	select {
	case err := <-first.done:
		t.Logf("the leader exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Outrigger did not exit within 30s of losing its Lease")
	}
	testenv.Eventually(t, 30*time.Second, "the secure port closed", func() (bool, error) {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			return true, nil
		}
		return false, c.Close()
	})
	restarted := time.Now()
	second := startOutrigger(t, cloud, hang, flags...)
	at["lease taken"] = sc.after(t, 2, "the restarted replica serving as a standby", func(s scrape) bool {
		select {
		case err := <-second.done:
			t.Fatalf("the restarted Outrigger exited: %v", err)
		default:
		}
		return s.at.After(restarted) && s.has("leader_election_master_status") && s.sum("leader_election_master_status", "name", lease) == 0
	})
	sc.stop()
	last := at["lease taken"]

	// Every metric an alert or a panel reads is served: an expression over
	// a name Outrigger does not serve can never fire or show anything.
	for _, a := range alerts {
		for _, n := range metricNames(t, a.Expr) {
			if !sc.served(n) {
				t.Errorf("alert %s reads %s, which Outrigger does not serve", a.Alert, n)
			}
		}
	}
	for _, q := range queries {
		for _, n := range metricNames(t, q.expr) {
			if !sc.served(n) {
				t.Errorf("dashboard %q reads %s, which Outrigger does not serve", q.title, n)
			}
		}
	}

	// Each alert's condition (its `for` aside) holds under its fault and
	// not while all was well; each panel shows data.
	eng := promql.NewEngine(promql.EngineOpts{
		Logger: slog.New(slog.DiscardHandler), MaxSamples: 10_000_000, Timeout: time.Minute,
		LookbackDelta: 5 * time.Minute, EnableAtModifier: true, EnableNegativeOffset: true,
	})
	for _, a := range alerts {
		if got := sc.eval(t, eng, a.Expr, healthy); len(got) > 0 {
			t.Errorf("alert %s fires while all is well: %v", a.Alert, got)
		}
		fault := firesUnder[a.Alert]
		if fault == "" {
			t.Logf("%s: not provoked; at the end: %v", a.Alert, sc.eval(t, eng, a.Expr, last))
			continue
		}
		got := sc.eval(t, eng, a.Expr, at[fault])
		t.Logf("%s, %s: %v", a.Alert, fault, got)
		if len(got) == 0 {
			t.Errorf("alert %s does not fire under its fault (%s)", a.Alert, fault)
		}
	}
	for _, q := range queries {
		if got := sc.eval(t, eng, q.expr, last); len(got) == 0 {
			t.Errorf("dashboard %q shows nothing: %s", q.title, q.expr)
		}
	}
}

// renderMonitoring renders the chart with its alerts and dashboard on.
func renderMonitoring(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	rel, err := charttest.Render(charttest.Namespace, "cloudProvider: sim\nmonitoring: {prometheusRule: {enabled: true}, grafanaDashboard: {enabled: true}}\n")
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	objs, err := charttest.Decode([]byte(rel.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func one(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	m := charttest.ByKind(objs, kind)
	if len(m) != 1 {
		t.Fatalf("want one %s, rendered %v", kind, charttest.Keys(m))
	}
	for _, o := range m {
		return o
	}
	return nil
}

// chartAlerts checks the rendered PrometheusRule's groups as Prometheus
// loads a rule file (promtool check rules: PromQL, durations, label names,
// annotation templates) and returns its alerts.
func chartAlerts(t *testing.T, objs []*unstructured.Unstructured) []rulefmt.Rule {
	t.Helper()
	spec, _, _ := unstructured.NestedMap(one(t, objs, "PrometheusRule").Object, "spec")
	raw, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(raw, false, model.LegacyValidation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("the PrometheusRule's rules do not load: %v", errs)
	}
	var out []rulefmt.Rule
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule that is no alert", g.Name)
				continue
			}
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		t.Fatal("the PrometheusRule holds no alerts")
	}
	return out
}

// panelQuery is one query of the dashboard: a panel's target or a
// variable's.
type panelQuery struct{ title, expr string }

// dashboardQueries reads the rendered dashboard's queries, with Grafana's
// variables replaced as Grafana does before it asks Prometheus.
func dashboardQueries(t *testing.T, objs []*unstructured.Unstructured) []panelQuery {
	t.Helper()
	data, _, _ := unstructured.NestedString(one(t, objs, "ConfigMap").Object, "data", "outrigger.json")
	var d struct {
		Panels     []dashPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name, Type string
				Query      json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal([]byte(data), &d); err != nil {
		t.Fatalf("the dashboard: %v", err)
	}
	vars := strings.NewReplacer("$job", job, "$__rate_interval", "1m")
	var out []panelQuery
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				out = append(out, panelQuery{p.Title, vars.Replace(tg.Expr)})
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\((.+), *[a-z_]+\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(selector, label)", v.Name, q.Query)
		}
		out = append(out, panelQuery{"variable " + v.Name, m[1]})
	}
	return out
}

type dashPanel struct {
	Type, Title string
	Targets     []struct{ Expr string } `json:"targets"`
	Panels      []dashPanel             `json:"panels"`
}

// checkRunbooks: each alert's runbook_url is a section of
// docs/troubleshooting.md.
func checkRunbooks(t *testing.T, alerts []rulefmt.Rule) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(charttest.Dir(), "..", "..", "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			anchors[githubAnchor(h)] = true
		}
	}
	for _, a := range alerts {
		_, frag, ok := strings.Cut(a.Annotations["runbook_url"], "/docs/troubleshooting.md#")
		if !ok || !anchors[frag] {
			t.Errorf("alert %s: runbook_url %q is no section of docs/troubleshooting.md", a.Alert, a.Annotations["runbook_url"])
		}
	}
}

// githubAnchor is the fragment GitHub gives a heading.
func githubAnchor(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// metricNames are the metric names an expression selects.
func metricNames(t *testing.T, expr string) []string {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			t.Errorf("%s: a selector without a metric name", expr)
		}
		names = append(names, name)
		return nil
	})
	return names
}

// outrigger is one Outrigger run in this process, as the binary runs it.
type outrigger struct{ done chan error }

// startOutrigger runs Outrigger until the test ends, as
// testenv.StartOutrigger does, with the sim provider behind hang, and
// reports when it exits by itself.
func startOutrigger(t *testing.T, cloud *testenv.Cloud, hang *gate, flags ...string) *outrigger {
	t.Helper()
	opts := manager.NewOptions()
	fs := pflag.NewFlagSet("outrigger", pflag.ContinueOnError)
	opts.AddFlags(fs)
	args := append([]string{"--kubeconfig=" + testenv.Kubeconfig, "--cloud-provider=sim", "--cloud-config=" + cloud.ConfigFile, "--node-monitor-period=200ms"}, flags...)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ctx = klog.NewContext(ctx, klog.NewKlogr().WithValues("test", t.Name()))
	reg := provider.NewRegistry()
	reg.Register(sim.ProviderName, func(config io.Reader) (cloudprovider.Interface, error) {
		p, err := sim.New(config)
		if err != nil {
			return nil, err
		}
		return &hangingSim{Provider: p.(*sim.Provider), gate: hang}, nil
	})
	mgr, err := manager.New(ctx, opts, reg)
	if err != nil {
		cancel()
		t.Fatalf("starting outrigger: %v", err)
	}
	o := &outrigger{done: make(chan error, 1)}
	exited := make(chan struct{})
	go func() {
		o.done <- mgr.Start(ctx)
		close(exited)
	}()
	t.Cleanup(func() {
		cancel()
		<-exited
	})
	return o
}

// waitLeaseEvent waits for an Event of the reason on the Lease, which
// docs/troubleshooting.md lists.
func waitLeaseEvent(t *testing.T, reason string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, "a "+reason+" Event on the Lease", func() (bool, error) {
		evs, err := testenv.Client.CoreV1().Events("kube-system").List(context.Background(),
			metav1.ListOptions{FieldSelector: "involvedObject.kind=Lease,involvedObject.name=" + lease + ",reason=" + reason})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			t.Logf("Event %s %s on Lease %s from %s: %s", e.Type, e.Reason, e.InvolvedObject.Name, e.Source.Component, e.Message)
		}
		return len(evs.Items) > 0, nil
	})
}

// createLBService creates a LoadBalancer Service, deleted when the test
// ends.
func createLBService(t *testing.T) string {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("mon-lb"), Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80), Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := testenv.Client.CoreV1().Services("default").Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = testenv.Client.CoreV1().Services("default").Delete(context.Background(), svc.Name, metav1.DeleteOptions{})
	})
	return svc.Name
}

// takeLease makes holder the Lease's holder for an hour.
func takeLease(t *testing.T, holder string) {
	t.Helper()
	leases := testenv.Client.CoordinationV1().Leases("kube-system")
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(context.Background(), lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NowMicro()
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To(holder), ptr.To[int32](3600)
		l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
		_, err = leases.Update(context.Background(), l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("taking the Lease: %v", err)
	}
}

// scraperToken is a token of a ServiceAccount allowed GET /metrics, as a
// Prometheus in the cluster has.
func scraperToken(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	c := testenv.Client
	name := testenv.Name("prometheus")
	if _, err := c.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: "default"}}}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = c.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
		_ = c.CoreV1().ServiceAccounts("default").Delete(ctx, name, metav1.DeleteOptions{})
	})
	tok, err := c.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}
