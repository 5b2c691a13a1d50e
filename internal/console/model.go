package console

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/outrigger-ccm/outrigger/internal/controllers/service"
)

// Snapshot is everything the page shows but the call charts, which come
// separately and more often (Calls).
type Snapshot struct {
	Generated time.Time `json:"generated"`
	// LoadBalancers are the first maxRows Services matching the view, by
	// namespace and name; LoadBalancerCount counts them all.
	LoadBalancers     []LoadBalancer `json:"loadBalancers"`
	LoadBalancerCount Count          `json:"loadBalancerCount"`
	Pools             []Pool         `json:"pools"`
	// Nodes are the first maxRows nodes matching the view, by name;
	// NodeCount counts them all.
	Nodes     []Node `json:"nodes"`
	NodeCount Count  `json:"nodeCount"`
	// Gateways are the first maxRows Gateways matching the view, by
	// namespace and name; GatewayCount counts them all (Ready:
	// Programmed). NoGatewayAPI says why there are none to show when the
	// Gateway API is not read at all (its CRDs are not served, say).
	Gateways     []Gateway `json:"gateways"`
	GatewayCount Count     `json:"gatewayCount"`
	NoGatewayAPI string    `json:"noGatewayAPI,omitempty"`
	Timeline     []Entry   `json:"timeline"`
	Actions      []Action  `json:"actions,omitempty"`
	// Warnings say what the console cannot show and why (a resource it
	// may not list), so that an empty table is not mistaken for none.
	Warnings []string `json:"warnings,omitempty"`
	// Degraded names the provider method families with many calls
	// abandoned at their deadline: the provider is hung on those objects.
	Degraded []string `json:"degraded,omitempty"`
}

// Count sums up a table: every row, the Ready ones, and those the view's
// filter matches (of which at most maxRows are sent).
type Count struct {
	Total    int `json:"total"`
	Ready    int `json:"ready"`
	Matching int `json:"matching"`
}

// View is what a page asks to see. The filters are applied here, not in
// the page: at 50,000 nodes and 10,000 Services a page that received every
// row spent seconds receiving and parsing tens of megabytes to draw 200 of
// them.
type View struct {
	// Services keeps the Services whose namespace/name, addresses, state,
	// reason or message contain it (case-insensitive).
	Services string
	// NotReady keeps the Services not Ready.
	NotReady bool
	// Nodes keeps the nodes whose name, zone, state, providerID or
	// instance type contain it (case-insensitive).
	Nodes string
	// Gateways keeps the Gateways whose namespace/name, class,
	// controller, state, reason, message or addresses contain it
	// (case-insensitive).
	Gateways string
}

// maxFilter bounds a view's filter text.
const maxFilter = 256

// ParseView reads a view from a request's query: services, notReady=1,
// nodes and gateways.
func ParseView(q url.Values) (View, error) {
	v := View{
		Services: strings.ToLower(strings.TrimSpace(q.Get("services"))),
		NotReady: q.Get("notReady") == "1" || q.Get("notReady") == "true",
		Nodes:    strings.ToLower(strings.TrimSpace(q.Get("nodes"))),
		Gateways: strings.ToLower(strings.TrimSpace(q.Get("gateways"))),
	}
	if len(v.Services) > maxFilter || len(v.Nodes) > maxFilter || len(v.Gateways) > maxFilter {
		return View{}, fmt.Errorf("a filter is longer than %d bytes", maxFilter)
	}
	return v, nil
}

// LoadBalancer is one Service of type LoadBalancer.
type LoadBalancer struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Class     string `json:"class,omitempty"`
	// Provider is the provider of this Outrigger that serves the class
	// ("" when none does).
	Provider              string   `json:"provider,omitempty"`
	ExternalTrafficPolicy string   `json:"externalTrafficPolicy"`
	VIPs                  []string `json:"vips"`
	Ports                 []Port   `json:"ports"`
	// State is Ready (an address and no failing condition), Degraded (an
	// address, but the condition says something is wrong), Pending or
	// Elsewhere (another controller's class).
	State      string      `json:"state"`
	Reason     string      `json:"reason,omitempty"`
	Message    string      `json:"message,omitempty"`
	Conditions []Condition `json:"conditions,omitempty"`
	// Backends lists the backend nodes, unhealthy first, at most
	// maxBackendsListed; BackendsTotal and BackendsHealthy count them all.
	Backends        []Backend  `json:"backends"`
	BackendsTotal   int        `json:"backendsTotal"`
	BackendsHealthy int        `json:"backendsHealthy"`
	Endpoints       []Endpoint `json:"endpoints,omitempty"`
	Events          []Entry    `json:"events,omitempty"`
}

// Port is one Service port with its node port, where the load balancer
// sends traffic on each backend node.
type Port struct {
	Name     string `json:"name,omitempty"`
	Protocol string `json:"protocol"`
	Port     int32  `json:"port"`
	NodePort int32  `json:"nodePort,omitempty"`
}

// Condition is a Service status condition.
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Backend is a node behind a load balancer, with the address the load
// balancer reaches it on and whether it can take traffic.
type Backend struct {
	Node    string `json:"node"`
	Target  string `json:"target,omitempty"`
	Healthy bool   `json:"healthy"`
	Why     string `json:"why,omitempty"`
}

// Endpoint is one EndpointSlice endpoint of the Service.
type Endpoint struct {
	Address string `json:"address"`
	Node    string `json:"node,omitempty"`
	Ready   bool   `json:"ready"`
}

// Pool is an address range and how much of it is taken.
type Pool struct {
	Name string `json:"name"`
	// Kind is "vip" (load balancer addresses) or "podcidr" (node pod
	// CIDRs carved out of a cluster CIDR).
	Kind string `json:"kind"`
	CIDR string `json:"cidr"`
	// Unit is what one slot is: an address, or a /24 for pod CIDRs.
	Unit string `json:"unit"`
	// Size is the number of slots, capped at maxPoolSize for display.
	Size int64 `json:"size"`
	Used int   `json:"used"`
	// Taken are the slots in use with what holds each, the first maxTaken
	// of them; Index places it in the grid (slot number within the range).
	Taken []PoolSlot `json:"taken"`
}

// PoolSlot is one used slot of a pool.
type PoolSlot struct {
	Index int64  `json:"index"`
	Value string `json:"value"`
	Owner string `json:"owner"`
}

// Node is a node's cloud-facing state.
type Node struct {
	Name         string `json:"name"`
	ProviderID   string `json:"providerID,omitempty"`
	Zone         string `json:"zone,omitempty"`
	Region       string `json:"region,omitempty"`
	InstanceType string `json:"instanceType,omitempty"`
	// Provider is the provider of this Outrigger that serves the node's
	// providerID scheme ("" when none does).
	Provider    string `json:"provider,omitempty"`
	Initialized bool   `json:"initialized"`
	Ready       bool   `json:"ready"`
	// State sums up the lifecycle: Uninitialized, Ready, NotReady,
	// Shutdown (the cloud says the instance is stopped) or Terminating.
	State     string   `json:"state"`
	Addresses []string `json:"addresses"`
	PodCIDRs  []string `json:"podCIDRs,omitempty"`
}

// Entry is one line of the timeline: an Event, or what the call layer did
// in one sampling interval.
type Entry struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"` // event or calls
	Type    string    `json:"type"` // Normal or Warning
	Object  string    `json:"object,omitempty"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Source  string    `json:"source,omitempty"`
	Count   int32     `json:"count,omitempty"`
}

// Range is an address range the console reports the usage of.
type Range struct {
	Name   string
	Prefix netip.Prefix
	// NodeMask, when set, makes this a cluster CIDR: its slots are the
	// node pod CIDRs of that size, taken by nodes' spec.podCIDRs. Unset,
	// its slots are addresses, taken by Services' load balancer ingress.
	NodeMask int
}

const (
	// maxRows is how many rows of each table a snapshot carries: what a
	// page draws. The filters reach the rest.
	maxRows = 200
	// maxTaken bounds a pool's list of taken slots: the page draws a grid
	// of ranges up to 1,024 slots and lists maxRows of a larger one.
	maxTaken = 1024
	// maxBackendsListed bounds each Service's backend list: at 5,000
	// nodes, listing all for 1,000 Services would be five million rows.
	maxBackendsListed = 10
	// maxEventsPerObject is how many Events a Service shows.
	maxEventsPerObject = 5
	// maxTimeline bounds the timeline.
	maxTimeline = 300
	// maxPoolSize caps a pool's slot count so IPv6 ranges stay numbers.
	maxPoolSize = 1 << 40
)

// Node lifecycle markers, as the node controllers set them.
const (
	taintUninitialized = "node.cloudprovider.kubernetes.io/uninitialized"
	taintShutdown      = "node.cloudprovider.kubernetes.io/shutdown"
)

// inputs are the objects a snapshot is built from.
type inputs struct {
	now      time.Time
	services []*corev1.Service
	nodes    []*corev1.Node
	slices   []*discoveryv1.EndpointSlice
	events   []*corev1.Event
	gateways gatewayInputs
	ranges   []Range
	// owners are the providers of this Outrigger, with what each serves.
	owners []Owner
	calls  []Entry
	view   View
}

// build turns the objects into what the page shows: counts over
// everything, rows of what in.view matches, at most maxRows of each. Only
// the rows sent pay for their details (backends, endpoints, Events); the
// rest costs a state and a filter test each. It is pure, so the unit tests
// check it on objects made in memory.
func build(in inputs) Snapshot {
	s := Snapshot{Generated: in.now, LoadBalancers: []LoadBalancer{}, Nodes: []Node{}}
	if len(in.owners) == 0 {
		in.owners = []Owner{{}} // one provider: every node, no class
	}
	byObject := eventsByObject(in.events)

	nodes := slices.Clone(in.nodes)
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return cmp.Compare(a.Name, b.Name) })
	for _, n := range nodes {
		state := nodeState(n)
		s.NodeCount.Total++
		if state == "Ready" {
			s.NodeCount.Ready++
		}
		if !nodeMatches(n, state, in.view.Nodes) {
			continue
		}
		s.NodeCount.Matching++
		if len(s.Nodes) < maxRows {
			v := nodeView(n)
			v.Provider = nodeOwner(n, in.owners)
			s.Nodes = append(s.Nodes, v)
		}
	}

	lbServices := make([]*corev1.Service, 0, len(in.services))
	for _, svc := range in.services {
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			lbServices = append(lbServices, svc)
		}
	}
	slices.SortFunc(lbServices, func(a, b *corev1.Service) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	var shown []*corev1.Service
	for _, svc := range lbServices {
		key := svc.Namespace + "/" + svc.Name
		lb := lbView(svc, in.owners)
		lb.Events = byObject["Service/"+key]
		if lb.State == "Pending" && lb.Reason == "" {
			lb.Reason, lb.Message = pendingWhy(lb.Events)
		}
		s.LoadBalancerCount.Total++
		if lb.State == "Ready" {
			s.LoadBalancerCount.Ready++
		}
		if !lbMatches(&lb, in.view) {
			continue
		}
		s.LoadBalancerCount.Matching++
		if len(s.LoadBalancers) < maxRows {
			s.LoadBalancers = append(s.LoadBalancers, lb)
			shown = append(shown, svc)
		}
	}
	if len(shown) > 0 {
		// Endpoints of the Services shown, with the nodes that have a
		// ready one.
		want := make(map[string]int, len(shown))
		for i, svc := range shown {
			want[svc.Namespace+"/"+svc.Name] = i
		}
		readyNodes := make([]map[string]bool, len(shown))
		for _, es := range in.slices {
			svc := es.Labels[discoveryv1.LabelServiceName]
			i, ok := want[es.Namespace+"/"+svc]
			if svc == "" || !ok {
				continue
			}
			lb := &s.LoadBalancers[i]
			for _, ep := range es.Endpoints {
				ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
				node := ""
				if ep.NodeName != nil {
					node = *ep.NodeName
				}
				for _, a := range ep.Addresses {
					lb.Endpoints = append(lb.Endpoints, Endpoint{Address: a, Node: node, Ready: ready})
				}
				if ready && node != "" {
					if readyNodes[i] == nil {
						readyNodes[i] = map[string]bool{}
					}
					readyNodes[i][node] = true
				}
			}
		}
		// Backend candidates are the same for every Service: computed once.
		backends, readyBackends := backendNodes(nodes)
		for i, svc := range shown {
			lb := &s.LoadBalancers[i]
			lb.Backends, lb.BackendsTotal, lb.BackendsHealthy = backendsOf(svc, backends, readyBackends, readyNodes[i])
		}
	}

	buildGateways(&s, in.gateways, in.services, in.owners, byObject, in.view)

	for _, r := range in.ranges {
		s.Pools = append(s.Pools, poolUsage(r, in.services, nodes))
	}
	s.Timeline = timeline(in.events, in.calls)
	return s
}

// lbMatches says whether the view keeps lb, as the page's filter box
// reads: any of its fields containing the text.
func lbMatches(lb *LoadBalancer, v View) bool {
	if v.NotReady && lb.State == "Ready" {
		return false
	}
	if v.Services == "" {
		return true
	}
	if containsFold(lb.Namespace+"/"+lb.Name, v.Services) || containsFold(lb.State, v.Services) ||
		containsFold(lb.Reason, v.Services) || containsFold(lb.Message, v.Services) {
		return true
	}
	return slices.ContainsFunc(lb.VIPs, func(a string) bool { return containsFold(a, v.Services) })
}

// nodeMatches says whether the view's node filter keeps n.
func nodeMatches(n *corev1.Node, state, q string) bool {
	if q == "" {
		return true
	}
	for _, f := range []string{n.Name, n.Labels[corev1.LabelTopologyZone], state, n.Spec.ProviderID, n.Labels[corev1.LabelInstanceTypeStable]} {
		if containsFold(f, q) {
			return true
		}
	}
	return false
}

// containsFold reports whether s contains q, q being lower case already.
func containsFold(s, q string) bool {
	return strings.Contains(strings.ToLower(s), q)
}

func nodeView(n *corev1.Node) Node {
	v := Node{
		Name:         n.Name,
		ProviderID:   n.Spec.ProviderID,
		Zone:         n.Labels[corev1.LabelTopologyZone],
		Region:       n.Labels[corev1.LabelTopologyRegion],
		InstanceType: n.Labels[corev1.LabelInstanceTypeStable],
		PodCIDRs:     n.Spec.PodCIDRs,
		Initialized:  !hasTaint(n, taintUninitialized),
		Ready:        nodeReady(n),
		State:        nodeState(n),
	}
	for _, a := range n.Status.Addresses {
		v.Addresses = append(v.Addresses, string(a.Type)+" "+a.Address)
	}
	return v
}

// nodeState sums up a node's lifecycle without building its row: every
// node is counted, 200 are shown.
func nodeState(n *corev1.Node) string {
	switch {
	case !n.DeletionTimestamp.IsZero():
		return "Terminating"
	case hasTaint(n, taintUninitialized):
		return "Uninitialized"
	case hasTaint(n, taintShutdown):
		return "Shutdown"
	case nodeReady(n):
		return "Ready"
	}
	return "NotReady"
}

func hasTaint(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// nodeOwner is the provider serving node's providerID scheme, or "".
func nodeOwner(node *corev1.Node, owners []Owner) string {
	scheme, _, hasScheme := strings.Cut(node.Spec.ProviderID, "://")
	for _, o := range owners {
		if len(o.Platforms) == 0 || hasScheme && slices.Contains(o.Platforms, scheme) {
			return o.Provider
		}
	}
	return ""
}

func lbView(svc *corev1.Service, owners []Owner) LoadBalancer {
	lb := LoadBalancer{
		Namespace:             svc.Namespace,
		Name:                  svc.Name,
		ExternalTrafficPolicy: string(svc.Spec.ExternalTrafficPolicy),
	}
	if lb.ExternalTrafficPolicy == "" {
		lb.ExternalTrafficPolicy = string(corev1.ServiceExternalTrafficPolicyCluster)
	}
	if svc.Spec.LoadBalancerClass != nil {
		lb.Class = *svc.Spec.LoadBalancerClass
	}
	for _, p := range svc.Spec.Ports {
		lb.Ports = append(lb.Ports, Port{Name: p.Name, Protocol: string(p.Protocol), Port: p.Port, NodePort: p.NodePort})
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		switch {
		case in.IP != "":
			lb.VIPs = append(lb.VIPs, in.IP)
		case in.Hostname != "":
			lb.VIPs = append(lb.VIPs, in.Hostname)
		}
	}
	for _, c := range svc.Status.Conditions {
		lb.Conditions = append(lb.Conditions, Condition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message})
	}
	ready := meta.FindStatusCondition(svc.Status.Conditions, service.ConditionLoadBalancerReady)
	switch {
	case !servedClass(&lb, owners):
		lb.State = "Elsewhere"
		lb.Reason = "OtherClass"
		handled := make([]string, 0, len(owners))
		for _, o := range owners {
			if o.Class == "" {
				handled = append(handled, "Services without a class")
			} else {
				handled = append(handled, fmt.Sprintf("class %q", o.Class))
			}
		}
		lb.Message = fmt.Sprintf("spec.loadBalancerClass is %q: another controller provisions it (this Outrigger handles %s)", lb.Class, strings.Join(handled, ", "))
	case len(lb.VIPs) == 0:
		lb.State = "Pending"
		if ready != nil && ready.Status != "True" {
			lb.Reason, lb.Message = ready.Reason, ready.Message
		}
	case ready != nil && ready.Status != "True":
		lb.State = "Degraded"
		lb.Reason, lb.Message = ready.Reason, ready.Message
	default:
		lb.State = "Ready"
	}
	return lb
}

// pendingWhy explains a pending Service without a condition: the latest
// Warning Event if there is one, else that the controller has not got to
// it yet.
func pendingWhy(events []Entry) (string, string) {
	if reason, msg := warningWhy(events); reason != "" {
		return reason, msg
	}
	return "NotSyncedYet", "Waiting for the service controller: no LoadBalancerReady condition and no Warning Event yet"
}

// backendNode is what the backend lists need of a node, worked out once
// per snapshot rather than once per Service (5,000 nodes times 1,000
// Services is a lot of condition scans).
type backendNode struct {
	name  string
	ip    netip.Addr
	ready bool
}

func backendNodes(nodes []*corev1.Node) ([]backendNode, int) {
	var out []backendNode
	ready := 0
	for _, n := range nodes {
		if !service.IsBackend(n) {
			continue
		}
		b := backendNode{name: n.Name, ready: nodeReady(n)}
		b.ip, _ = netip.ParseAddr(internalIP(n))
		if b.ready {
			ready++
		}
		out = append(out, b)
	}
	return out, ready
}

// backendsOf lists the Service's backend nodes, unhealthy ones first, at
// most maxBackendsListed, and counts them all. With externalTrafficPolicy
// Local a node takes traffic only with a ready endpoint of the Service on
// it (the load balancer's health check fails elsewhere); with Cluster,
// every Ready node does.
func backendsOf(svc *corev1.Service, nodes []backendNode, readyCount int, endpoints map[string]bool) ([]Backend, int, int) {
	local := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	var nodePort int32
	if len(svc.Spec.Ports) > 0 {
		nodePort = svc.Spec.Ports[0].NodePort
	}
	view := func(n backendNode) Backend {
		b := Backend{Node: n.name, Healthy: true}
		if n.ip.IsValid() && nodePort != 0 {
			b.Target = netip.AddrPortFrom(n.ip, uint16(nodePort)).String()
		}
		switch {
		case !n.ready:
			b.Healthy, b.Why = false, "node is not Ready"
		case local && !endpoints[n.name]:
			b.Healthy, b.Why = false, "no ready endpoint on this node (externalTrafficPolicy Local)"
		}
		return b
	}
	healthy := readyCount
	if local {
		healthy = 0
		for _, n := range nodes {
			if n.ready && endpoints[n.name] {
				healthy++
			}
		}
	}
	// Stop as soon as the list is settled: every unhealthy node found (or
	// enough of them), and enough healthy ones.
	unhealthy := len(nodes) - healthy
	var bad, good []Backend
	for _, n := range nodes {
		if len(bad) == min(unhealthy, maxBackendsListed) && len(good) >= maxBackendsListed-len(bad) {
			break
		}
		if !n.ready || (local && !endpoints[n.name]) {
			bad = append(bad, view(n))
		} else if len(good) < maxBackendsListed {
			good = append(good, view(n))
		}
	}
	list := append(bad, good...)
	if len(list) > maxBackendsListed {
		list = list[:maxBackendsListed]
	}
	return list, len(nodes), healthy
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

func entryOf(e *corev1.Event) Entry {
	obj := e.InvolvedObject.Kind + "/"
	if e.InvolvedObject.Namespace != "" {
		obj += e.InvolvedObject.Namespace + "/"
	}
	obj += e.InvolvedObject.Name
	src := e.Source.Component
	if src == "" {
		src = e.ReportingController
	}
	return Entry{Time: eventTime(e), Kind: "event", Type: e.Type, Object: obj, Reason: e.Reason, Message: e.Message, Source: src, Count: e.Count}
}

// eventsByObject indexes the newest Events per involved object.
func eventsByObject(events []*corev1.Event) map[string][]Entry {
	sorted := slices.Clone(events)
	slices.SortFunc(sorted, func(a, b *corev1.Event) int { return eventTime(b).Compare(eventTime(a)) })
	out := map[string][]Entry{}
	for _, e := range sorted {
		k := entryOf(e).Object
		if len(out[k]) < maxEventsPerObject {
			out[k] = append(out[k], entryOf(e))
		}
	}
	return out
}

// timeline merges Events and call entries, newest first.
func timeline(events []*corev1.Event, calls []Entry) []Entry {
	out := make([]Entry, 0, len(events)+len(calls))
	for _, e := range events {
		out = append(out, entryOf(e))
	}
	out = append(out, calls...)
	slices.SortStableFunc(out, func(a, b Entry) int { return b.Time.Compare(a.Time) })
	if len(out) > maxTimeline {
		out = out[:maxTimeline]
	}
	return out
}

// poolUsage counts what of r is taken: load balancer addresses for a VIP
// range, node pod CIDRs for a cluster CIDR.
func poolUsage(r Range, services []*corev1.Service, nodes []*corev1.Node) Pool {
	p := Pool{Name: r.Name, CIDR: r.Prefix.String()}
	bits := r.Prefix.Addr().BitLen()
	base := r.Prefix.Masked().Addr()
	if r.NodeMask > 0 {
		p.Kind, p.Unit = "podcidr", fmt.Sprintf("/%d", r.NodeMask)
		p.Size = slotCount(r.NodeMask - r.Prefix.Bits())
		for _, n := range nodes {
			for _, c := range n.Spec.PodCIDRs {
				pc, err := netip.ParsePrefix(c)
				if err != nil || !r.Prefix.Contains(pc.Addr()) {
					continue
				}
				p.Taken = append(p.Taken, PoolSlot{Index: offset(base, pc.Addr(), bits-r.NodeMask), Value: c, Owner: "Node/" + n.Name})
			}
		}
	} else {
		p.Kind, p.Unit = "vip", "address"
		p.Size = slotCount(bits - r.Prefix.Bits())
		for _, svc := range services {
			for _, in := range svc.Status.LoadBalancer.Ingress {
				a, err := netip.ParseAddr(in.IP)
				if err != nil || !r.Prefix.Contains(a) {
					continue
				}
				p.Taken = append(p.Taken, PoolSlot{Index: offset(base, a, 0), Value: in.IP, Owner: "Service/" + svc.Namespace + "/" + svc.Name})
			}
		}
	}
	slices.SortFunc(p.Taken, func(a, b PoolSlot) int { return cmp.Compare(a.Index, b.Index) })
	p.Used = len(p.Taken)
	if len(p.Taken) > maxTaken {
		p.Taken = p.Taken[:maxTaken]
	}
	return p
}

func slotCount(bits int) int64 {
	if bits >= 40 {
		return maxPoolSize
	}
	return 1 << bits
}

// offset is (a - base) >> shift; a distance beyond the low 64 bits (a
// wide IPv6 range) is capped, as the pool's size is.
func offset(base, a netip.Addr, shift int) int64 {
	b16, a16 := base.As16(), a.As16()
	if [8]byte(b16[:8]) != [8]byte(a16[:8]) {
		return maxPoolSize
	}
	d := (binary.BigEndian.Uint64(a16[8:]) - binary.BigEndian.Uint64(b16[8:])) >> uint(shift)
	if d > maxPoolSize {
		return maxPoolSize
	}
	return int64(d)
}

// ClusterRanges are the ranges of a --cluster-cidr (one or two CIDRs,
// comma-separated), each cut into node pod CIDRs of the mask for its
// family.
func ClusterRanges(clusterCIDR string, maskV4, maskV6 int) ([]Range, error) {
	var out []Range
	for _, part := range strings.Split(clusterCIDR, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		p, err := netip.ParsePrefix(part)
		if err != nil {
			return nil, fmt.Errorf("cluster CIDR %q: %w", part, err)
		}
		r := Range{Name: "pods-ipv4", Prefix: p.Masked(), NodeMask: maskV4}
		if p.Addr().Is6() {
			r.Name, r.NodeMask = "pods-ipv6", maskV6
		}
		if r.NodeMask <= p.Bits() || r.NodeMask > p.Addr().BitLen() {
			return nil, fmt.Errorf("cluster CIDR %s: node mask /%d does not fit", p, r.NodeMask)
		}
		out = append(out, r)
	}
	return out, nil
}

// ParseRanges reads "name=cidr[/mask]" lists as the command line gives
// them; see Range.
func ParseRanges(specs []string) ([]Range, error) {
	var out []Range
	for _, s := range specs {
		name, rest, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("range %q: want name=CIDR or name=CIDR@nodeMask", s)
		}
		cidr, mask, hasMask := strings.Cut(rest, "@")
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			return nil, fmt.Errorf("range %q: %w", s, err)
		}
		r := Range{Name: name, Prefix: p.Masked()}
		if hasMask {
			if _, err := fmt.Sscan(mask, &r.NodeMask); err != nil || r.NodeMask <= p.Bits() || r.NodeMask > p.Addr().BitLen() {
				return nil, fmt.Errorf("range %q: node mask %q must be between /%d and /%d", s, mask, p.Bits()+1, p.Addr().BitLen())
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// servedClass finds the provider serving lb's class and records it in lb.
func servedClass(lb *LoadBalancer, owners []Owner) bool {
	for _, o := range owners {
		if o.Class == lb.Class {
			lb.Provider = o.Provider
			return true
		}
	}
	return false
}
