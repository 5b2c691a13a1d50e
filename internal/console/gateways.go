package console

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
)

// Gateway is one Gateway of any class, with its listeners and the routes
// attached to it.
type Gateway struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Class     string `json:"class"`
	// Controller is the class's controllerName ("" when the class does not
	// exist).
	Controller string `json:"controller,omitempty"`
	// Outrigger says the class names an Outrigger controller
	// (outrigger.dev/...); Provider is the provider of this Outrigger that
	// serves it ("" when none does).
	Outrigger bool   `json:"outrigger"`
	Provider  string `json:"provider,omitempty"`
	// State is Programmed, Degraded (programmed, but a listener is not),
	// NotProgrammed, NotAccepted or Pending (no controller has said yet).
	// Reason and Message say why when it is not Programmed.
	State      string      `json:"state"`
	Reason     string      `json:"reason,omitempty"`
	Message    string      `json:"message,omitempty"`
	Addresses  []string    `json:"addresses"`
	Listeners  []Listener  `json:"listeners"`
	Conditions []Condition `json:"conditions,omitempty"`
	// Routes are the routes naming the Gateway as a parent, at most
	// maxRoutesListed, those not accepted first; RoutesTotal counts them.
	Routes      []Route `json:"routes"`
	RoutesTotal int     `json:"routesTotal"`
	// LoadBalancer is the Service (namespace/name) Outrigger made to front
	// the Gateway, shown in the load balancers table.
	LoadBalancer string  `json:"loadBalancer,omitempty"`
	Events       []Entry `json:"events,omitempty"`
	// Traffic is what the data plane pods of an Outrigger Gateway
	// counted (traffic.go), nil for other Gateways or without a cluster.
	Traffic *GatewayTraffic `json:"traffic,omitempty"`
	// uid tells the Gateway from one made again under its name;
	// dataPlaneNamespace is its load balancer Service's namespace, where
	// its data plane pods run ("" when there is no such Service).
	uid                string
	dataPlaneNamespace string
	// unexplained: no controller has written a reason; a Warning Event
	// may say more.
	unexplained bool
}

// Listener is one listener of a Gateway with its status.
type Listener struct {
	Name           string      `json:"name"`
	Protocol       string      `json:"protocol"`
	Port           int32       `json:"port"`
	Hostname       string      `json:"hostname,omitempty"`
	AttachedRoutes int32       `json:"attachedRoutes"`
	Conditions     []Condition `json:"conditions,omitempty"`
	// Problem is the first condition saying something is wrong, as
	// "Type Status (Reason): message" ("" when none does).
	Problem string `json:"problem,omitempty"`
}

// Route is one parent reference from a route to a Gateway, with the
// conditions the route's status has for that parent.
type Route struct {
	Kind      string   `json:"kind"` // HTTPRoute, GRPCRoute, TCPRoute, UDPRoute or TLSRoute
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Hostnames []string `json:"hostnames,omitempty"`
	// Section and Port are the parent reference's sectionName and port.
	Section string `json:"section,omitempty"`
	Port    int32  `json:"port,omitempty"`
	// State is Accepted, NotAccepted, Unresolved (accepted, but a
	// reference does not resolve) or Pending (no status for this parent).
	State      string      `json:"state"`
	Reason     string      `json:"reason,omitempty"`
	Message    string      `json:"message,omitempty"`
	Conditions []Condition `json:"conditions,omitempty"`
}

// maxRoutesListed bounds each Gateway's route list: one Gateway may have
// thousands of routes.
const maxRoutesListed = 50

// routeIn is what the console reads of a route of any kind.
type routeIn struct {
	kind      string
	namespace string
	name      string
	hostnames []string
	parents   []gwv1.ParentReference
	status    []gwv1.RouteParentStatus
}

func httpRoutesIn(l []*gwv1.HTTPRoute) []routeIn {
	out := make([]routeIn, 0, len(l))
	for _, r := range l {
		out = append(out, routeIn{kind: "HTTPRoute", namespace: r.Namespace, name: r.Name, hostnames: hostnamesOf(r.Spec.Hostnames),
			parents: r.Spec.ParentRefs, status: r.Status.Parents})
	}
	return out
}

func grpcRoutesIn(l []*gwv1.GRPCRoute) []routeIn {
	out := make([]routeIn, 0, len(l))
	for _, r := range l {
		out = append(out, routeIn{kind: "GRPCRoute", namespace: r.Namespace, name: r.Name, hostnames: hostnamesOf(r.Spec.Hostnames),
			parents: r.Spec.ParentRefs, status: r.Status.Parents})
	}
	return out
}

func hostnamesOf(hs []gwv1.Hostname) []string {
	var out []string
	for _, h := range hs {
		out = append(out, string(h))
	}
	return out
}

func tcpRoutesIn(l []*gwv1.TCPRoute) []routeIn {
	out := make([]routeIn, 0, len(l))
	for _, r := range l {
		out = append(out, routeIn{kind: "TCPRoute", namespace: r.Namespace, name: r.Name, parents: r.Spec.ParentRefs, status: r.Status.Parents})
	}
	return out
}

func tlsRoutesIn(l []*gwv1.TLSRoute) []routeIn {
	out := make([]routeIn, 0, len(l))
	for _, r := range l {
		out = append(out, routeIn{kind: "TLSRoute", namespace: r.Namespace, name: r.Name, hostnames: hostnamesOf(r.Spec.Hostnames),
			parents: r.Spec.ParentRefs, status: r.Status.Parents})
	}
	return out
}

func udpRoutesIn(l []*gwv1.UDPRoute) []routeIn {
	out := make([]routeIn, 0, len(l))
	for _, r := range l {
		out = append(out, routeIn{kind: "UDPRoute", namespace: r.Namespace, name: r.Name, parents: r.Spec.ParentRefs, status: r.Status.Parents})
	}
	return out
}

// gatewayInputs are what the Gateways table is built from.
type gatewayInputs struct {
	classes  []*gwv1.GatewayClass
	gateways []*gwv1.Gateway
	routes   []routeIn
}

// buildGateways fills s's Gateways table: counts over every Gateway, rows
// of those the view matches, at most maxRows, only those paying for their
// routes and Events.
func buildGateways(s *Snapshot, in gatewayInputs, services []*corev1.Service, owners []Owner, byObject map[string][]Entry, view View) {
	s.Gateways = []Gateway{}
	controllers := make(map[string]string, len(in.classes))
	for _, c := range in.classes {
		controllers[c.Name] = string(c.Spec.ControllerName)
	}
	gws := slices.Clone(in.gateways)
	slices.SortFunc(gws, func(a, b *gwv1.Gateway) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for _, gw := range gws {
		key := gw.Namespace + "/" + gw.Name
		controller, classFound := controllers[string(gw.Spec.GatewayClassName)]
		g := gatewayView(gw, controller, classFound, owners)
		g.Events = byObject["Gateway/"+key]
		if g.unexplained || (g.State == "NotProgrammed" && g.Message == "") {
			if r, m := warningWhy(g.Events); r != "" {
				g.Reason, g.Message = r, m
			}
		}
		s.GatewayCount.Total++
		if g.State == "Programmed" {
			s.GatewayCount.Ready++
		}
		if !gatewayMatches(&g, view.Gateways) {
			continue
		}
		s.GatewayCount.Matching++
		if len(s.Gateways) < maxRows {
			s.Gateways = append(s.Gateways, g)
		}
	}
	if len(s.Gateways) == 0 {
		return
	}
	shown := make(map[string]*Gateway, len(s.Gateways))
	for i := range s.Gateways {
		g := &s.Gateways[i]
		shown[g.Namespace+"/"+g.Name] = g
	}
	for _, r := range in.routes {
		for _, ref := range r.parents {
			g := shown[parentGateway(r.namespace, ref)]
			if g == nil {
				continue
			}
			g.RoutesTotal++
			g.Routes = append(g.Routes, routeView(r, ref))
		}
	}
	for i := range s.Gateways {
		g := &s.Gateways[i]
		// Those not accepted first: they are what someone looks for.
		slices.SortStableFunc(g.Routes, func(a, b Route) int {
			return cmp.Or(cmp.Compare(routeRank(a.State), routeRank(b.State)), cmp.Compare(a.Kind, b.Kind),
				cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Section, b.Section))
		})
		if len(g.Routes) > maxRoutesListed {
			g.Routes = g.Routes[:maxRoutesListed]
		}
	}
	// The Services Outrigger made for the Gateways shown, by the
	// Gateway's UID (a Gateway made again under the same name is another).
	byUID := make(map[string]*Gateway, len(gws))
	for _, gw := range gws {
		if g := shown[gw.Namespace+"/"+gw.Name]; g != nil {
			byUID[string(gw.UID)] = g
		}
	}
	for _, svc := range services {
		if uid := svc.Labels[gateway.GatewayUIDLabel]; uid != "" {
			if g := byUID[uid]; g != nil {
				g.LoadBalancer = svc.Namespace + "/" + svc.Name
				g.dataPlaneNamespace = svc.Namespace
			}
		}
	}
}

func routeRank(state string) int {
	if state == "Accepted" {
		return 1
	}
	return 0
}

// gatewayMatches says whether the view's Gateway filter (lower case
// already) keeps g.
func gatewayMatches(g *Gateway, q string) bool {
	if q == "" {
		return true
	}
	for _, f := range []string{g.Namespace + "/" + g.Name, g.Class, g.Controller, g.State, g.Reason, g.Message} {
		if containsFold(f, q) {
			return true
		}
	}
	return slices.ContainsFunc(g.Addresses, func(a string) bool { return containsFold(a, q) })
}

// gatewayView is a Gateway's row, its state read from the conditions the
// specification defines (any controller writes them the same way).
func gatewayView(gw *gwv1.Gateway, controller string, classFound bool, owners []Owner) Gateway {
	g := Gateway{
		Namespace:  gw.Namespace,
		Name:       gw.Name,
		Class:      string(gw.Spec.GatewayClassName),
		Controller: controller,
		Outrigger:  strings.HasPrefix(controller, "outrigger.dev/"),
		uid:        string(gw.UID),
		Addresses:  []string{},
		Listeners:  []Listener{},
		Routes:     []Route{},
	}
	for _, o := range owners {
		if o.Provider != "" && controller == string(gateway.ControllerNameFor(o.Provider, o.Class)) {
			g.Provider = o.Provider
			break
		}
	}
	for _, a := range gw.Status.Addresses {
		g.Addresses = append(g.Addresses, a.Value)
	}
	g.Conditions = conditionsOf(gw.Status.Conditions)
	statuses := make(map[gwv1.SectionName]*gwv1.ListenerStatus, len(gw.Status.Listeners))
	for i := range gw.Status.Listeners {
		statuses[gw.Status.Listeners[i].Name] = &gw.Status.Listeners[i]
	}
	var badListener string
	var bad *metav1.Condition
	for _, l := range gw.Spec.Listeners {
		v := Listener{Name: string(l.Name), Protocol: string(l.Protocol), Port: l.Port}
		if l.Hostname != nil {
			v.Hostname = string(*l.Hostname)
		}
		if st := statuses[l.Name]; st != nil {
			v.AttachedRoutes = st.AttachedRoutes
			v.Conditions = conditionsOf(st.Conditions)
			if c := firstProblem(st.Conditions); c != nil {
				v.Problem = fmt.Sprintf("%s %s (%s): %s", c.Type, c.Status, c.Reason, c.Message)
				if bad == nil {
					badListener, bad = v.Name, c
				}
			}
		}
		g.Listeners = append(g.Listeners, v)
	}
	accepted := meta.FindStatusCondition(gw.Status.Conditions, string(gwv1.GatewayConditionAccepted))
	programmed := meta.FindStatusCondition(gw.Status.Conditions, string(gwv1.GatewayConditionProgrammed))
	switch {
	case !classFound:
		g.State, g.Reason = "Pending", "NoSuchClass"
		g.Message = fmt.Sprintf("GatewayClass %q does not exist: no controller serves this Gateway", g.Class)
	case accepted != nil && accepted.Status == metav1.ConditionFalse:
		g.State, g.Reason, g.Message = "NotAccepted", accepted.Reason, accepted.Message
	case programmed != nil && programmed.Status == metav1.ConditionTrue && bad != nil:
		g.State, g.Reason = "Degraded", bad.Reason
		g.Message = fmt.Sprintf("listener %s: %s", badListener, bad.Message)
	case programmed != nil && programmed.Status == metav1.ConditionTrue:
		g.State = "Programmed"
	case programmed != nil && programmed.Status == metav1.ConditionFalse:
		g.State, g.Reason, g.Message = "NotProgrammed", programmed.Reason, programmed.Message
	default:
		g.State = "Pending"
		switch {
		case programmed != nil:
			g.Reason, g.Message = programmed.Reason, programmed.Message
		case accepted != nil:
			g.Reason, g.Message = accepted.Reason, accepted.Message
		default:
			g.Reason = "NotSyncedYet"
		}
		if g.Message == "" || g.Message == "Waiting for controller" {
			// The CRD's default status: nobody has written any.
			g.unexplained = true
			g.Message = fmt.Sprintf("no controller has written this Gateway's status yet (class %s, controller %s)", g.Class, cmp.Or(controller, "none"))
		}
	}
	return g
}

// negativeConditions are the condition types whose True is the problem.
var negativeConditions = map[string]bool{
	string(gwv1.ListenerConditionConflicted):           true,
	string(gwv1.ListenerConditionOverlappingTLSConfig): true,
}

// firstProblem is the first condition saying something is wrong, or nil.
func firstProblem(cs []metav1.Condition) *metav1.Condition {
	for i, c := range cs {
		bad := c.Status == metav1.ConditionFalse
		if negativeConditions[c.Type] {
			bad = c.Status == metav1.ConditionTrue
		}
		if bad {
			return &cs[i]
		}
	}
	return nil
}

func conditionsOf(cs []metav1.Condition) []Condition {
	var out []Condition
	for _, c := range cs {
		out = append(out, Condition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message})
	}
	return out
}

// warningWhy is the newest Warning Event's reason and message, or "".
func warningWhy(events []Entry) (string, string) {
	for _, e := range events {
		if e.Type == corev1.EventTypeWarning {
			return e.Reason, e.Message
		}
	}
	return "", ""
}

// parentGateway is the namespace/name of the Gateway ref names, or "" when
// it names another kind of parent.
func parentGateway(routeNamespace string, ref gwv1.ParentReference) string {
	if (ref.Group != nil && *ref.Group != gwv1.GroupName) || (ref.Kind != nil && *ref.Kind != "Gateway") {
		return ""
	}
	ns := routeNamespace
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = string(*ref.Namespace)
	}
	return ns + "/" + string(ref.Name)
}

// routeView is r's row under the Gateway ref names, with the status its
// controller wrote for that very reference.
func routeView(r routeIn, ref gwv1.ParentReference) Route {
	v := Route{Kind: r.kind, Namespace: r.namespace, Name: r.name, Hostnames: r.hostnames}
	if ref.SectionName != nil {
		v.Section = string(*ref.SectionName)
	}
	if ref.Port != nil {
		v.Port = *ref.Port
	}
	var st *gwv1.RouteParentStatus
	for i := range r.status {
		if sameParent(r.namespace, r.status[i].ParentRef, ref) {
			st = &r.status[i]
			break
		}
	}
	if st == nil {
		v.State, v.Reason = "Pending", "NoParentStatus"
		v.Message = "no controller has written this route's status for this Gateway yet"
		return v
	}
	v.Conditions = conditionsOf(st.Conditions)
	accepted := meta.FindStatusCondition(st.Conditions, string(gwv1.RouteConditionAccepted))
	resolved := meta.FindStatusCondition(st.Conditions, string(gwv1.RouteConditionResolvedRefs))
	switch {
	case accepted != nil && accepted.Status == metav1.ConditionFalse:
		v.State, v.Reason, v.Message = "NotAccepted", accepted.Reason, accepted.Message
	case resolved != nil && resolved.Status == metav1.ConditionFalse:
		v.State, v.Reason, v.Message = "Unresolved", resolved.Reason, resolved.Message
	case accepted != nil && accepted.Status == metav1.ConditionTrue:
		v.State = "Accepted"
	default:
		v.State = "Pending"
		if accepted != nil {
			v.Reason, v.Message = accepted.Reason, accepted.Message
		}
	}
	return v
}

// sameParent compares two parent references of a route in namespace ns,
// defaults filled in.
func sameParent(ns string, a, b gwv1.ParentReference) bool {
	str := func(p *gwv1.SectionName) string {
		if p == nil {
			return ""
		}
		return string(*p)
	}
	port := func(p *gwv1.PortNumber) int32 {
		if p == nil {
			return 0
		}
		return *p
	}
	return parentGateway(ns, a) != "" && parentGateway(ns, a) == parentGateway(ns, b) &&
		str(a.SectionName) == str(b.SectionName) && port(a.Port) == port(b.Port)
}
