package console

import (
	"cmp"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
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
	// TenantMode says the console belongs to tenant mode: Tenants are
	// every tenant known, by name, TenantCount counts them (Ready: served
	// by some replica).
	TenantMode  bool     `json:"tenantMode,omitempty"`
	Tenants     []Tenant `json:"tenants,omitempty"`
	TenantCount Count    `json:"tenantCount"`
	// NoCluster says the console reads no cluster of its own (tenant
	// mode's secure port): only the tenants and the cloud calls are shown.
	NoCluster bool `json:"noCluster,omitempty"`
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
