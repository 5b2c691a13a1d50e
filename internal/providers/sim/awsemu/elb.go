package awsemu

import (
	"encoding/xml"
	"errors"
	"maps"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// ELBPath is where Handler serves Elastic Load Balancing's Query API for
// Classic Load Balancers (API version 2012-06-01, form-encoded POST, XML
// answers): point a provider's ELB endpoint at <base URL>/elb.
const ELBPath = "/elb/"

// elbNamespace is the XML namespace of Elastic Load Balancing's API version
// 2012-06-01, the one the AWS SDKs speak for classic load balancers.
const elbNamespace = "http://elasticloadbalancing.amazonaws.com/doc/2012-06-01/"

// elbUnsupported are real actions of the API the sim cloud does not
// implement: those the upstream AWS provider calls only when a Service's
// annotations ask (extra tags, proxy protocol, SSL policies), and a few
// common ones.
var elbUnsupported = map[string]bool{
	"AddTags": true, "RemoveTags": true, "DescribeTags": true, "DescribeInstanceHealth": true,
	"DescribeLoadBalancerPolicies": true, "DescribeLoadBalancerPolicyTypes": true,
	"CreateLoadBalancerPolicy": true, "DeleteLoadBalancerPolicy": true,
	"SetLoadBalancerPoliciesOfListener": true, "SetLoadBalancerPoliciesForBackendServer": true,
	"CreateLBCookieStickinessPolicy": true, "CreateAppCookieStickinessPolicy": true,
	"SetLoadBalancerListenerSSLCertificate": true, "EnableAvailabilityZonesForLoadBalancer": true,
	"DisableAvailabilityZonesForLoadBalancer": true, "DescribeAccountLimits": true,
}

// ELB is a Classic Load Balancer as Elastic Load Balancing shows it: a view
// of one of the sim cloud's load balancers and the classic data attached to
// it (elbOf).
type ELB struct {
	Name    string
	DNSName string
	// Scheme is "internet-facing" or "internal".
	Scheme         string
	VpcID          string
	Subnets        []string
	SecurityGroups []string
	Listeners      []ELBListener
	// Instances are the IDs of the registered instances that still run or
	// are stopped: as ELB does, a terminated instance is deregistered.
	Instances   []string
	HealthCheck ELBHealthCheck
	Attributes  ELBAttributes
	Tags        map[string]string
	Created     time.Time
}

// ELBListener forwards Protocol (HTTP, HTTPS, TCP, SSL) on
// LoadBalancerPort to InstancePort of every registered instance.
type ELBListener struct {
	Protocol         string
	LoadBalancerPort int32
	InstanceProtocol string
	InstancePort     int32
	SSLCertificateID string
}

// ELBHealthCheck probes Target ("TCP:30080", "HTTP:10256/healthz") on every
// instance.
type ELBHealthCheck struct {
	Target                               string
	Interval, Timeout                    int32
	HealthyThreshold, UnhealthyThreshold int32
}

// ELBAttributes are a load balancer's attributes.
type ELBAttributes struct {
	CrossZone                 bool
	IdleTimeout               int32
	ConnectionDraining        bool
	ConnectionDrainingTimeout int32
	AccessLog                 bool
	AccessLogBucket           string
	AccessLogPrefix           string
	AccessLogEmitInterval     int32
}

// classic is what a classic ELB carries beside the sim cloud's generic
// model of it, as provider data (simcloud.CreateLoadBalancerWithData): what
// only ELB has. The generic model keeps the rest: the name, the tags, each
// listener as TCP from LoadBalancerPort to InstancePort, the idle timeout
// (IdleTimeoutSeconds) and the registered instances (Backends). It is a
// value the cloud hands to every reader: a change edits a clone.
type classic struct {
	DNSName string
	// Scheme is "internet-facing" or "internal".
	Scheme         string
	VpcID          string
	Subnets        []string
	SecurityGroups []string
	// Listeners are the listeners as ELB was given them, for what the
	// generic model's TCP listener does not say: HTTP, HTTPS or SSL, the
	// certificate.
	Listeners   []ELBListener
	HealthCheck ELBHealthCheck
	// Attributes, but for IdleTimeout: the generic model's.
	Attributes ELBAttributes
	Created    time.Time
}

func (d classic) clone() classic {
	d.Subnets = slices.Clone(d.Subnets)
	d.SecurityGroups = slices.Clone(d.SecurityGroups)
	d.Listeners = slices.Clone(d.Listeners)
	return d
}

// genericListener is an ELB listener in the generic model: every protocol
// ELB balances runs over TCP.
func genericListener(l ELBListener) simcloud.Listener {
	return simcloud.Listener{Protocol: "TCP", Port: l.LoadBalancerPort, NodePort: l.InstancePort}
}

// backendOf is an instance as a backend of the generic model: its name (its
// node's) and its first IPv4 InternalIP (else its first), where the load
// balancer sends traffic.
func backendOf(in simcloud.Instance) simcloud.Backend {
	b := simcloud.Backend{Node: in.Name}
	for _, a := range in.Addresses {
		if a.Type != "InternalIP" {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
			b.Address = a.Address
			return b
		}
		if b.Address == "" {
			b.Address = a.Address
		}
	}
	return b
}

// ELBs lists the classic load balancers sorted by name.
func (aws *AWS) ELBs() []ELB {
	var out []ELB
	for _, lb := range aws.cloud.LoadBalancersWithData() {
		if d, ok := lb.Data.(classic); ok {
			out = append(out, aws.elbOf(lb.LoadBalancer, d))
		}
	}
	return out
}

// elbOf is lb, with its classic data d, as ELB shows it. Its instances are
// its backends' that are not terminated: ELB deregisters a terminated
// instance. It calls the cloud: never from inside a cloud callback.
func (aws *AWS) elbOf(lb simcloud.LoadBalancer, d classic) ELB {
	e := ELB{
		Name: lb.Name, DNSName: d.DNSName, Scheme: d.Scheme, VpcID: d.VpcID,
		Subnets: slices.Clone(d.Subnets), SecurityGroups: slices.Clone(d.SecurityGroups),
		HealthCheck: d.HealthCheck, Tags: maps.Clone(lb.Tags), Created: d.Created,
	}
	e.Attributes = attributesOf(lb.LoadBalancerSpec, d)
	e.Listeners = listenersOf(lb.Listeners, d)
	for _, b := range lb.Backends {
		if in, ok := aws.cloud.Get(b.Node); ok && in.State != simcloud.StateTerminated {
			e.Instances = append(e.Instances, in.ID)
		}
	}
	return e
}

func (aws *AWS) elbHandler(w http.ResponseWriter, r *http.Request) {
	aws.serveQuery(w, r, queryAPI{
		service: "ELB",
		actions: map[string]queryAction{
			"CreateLoadBalancer":                  aws.elbCreateLoadBalancer,
			"DescribeLoadBalancers":               aws.elbDescribeLoadBalancers,
			"DeleteLoadBalancer":                  aws.elbDeleteLoadBalancer,
			"ConfigureHealthCheck":                aws.elbConfigureHealthCheck,
			"RegisterInstancesWithLoadBalancer":   aws.elbRegisterInstances,
			"DeregisterInstancesFromLoadBalancer": aws.elbDeregisterInstances,
			"DescribeLoadBalancerAttributes":      aws.elbDescribeAttributes,
			"ModifyLoadBalancerAttributes":        aws.elbModifyAttributes,
			"CreateLoadBalancerListeners":         aws.elbCreateListeners,
			"DeleteLoadBalancerListeners":         aws.elbDeleteListeners,
			"ApplySecurityGroupsToLoadBalancer":   aws.elbApplySecurityGroups,
			"AttachLoadBalancerToSubnets":         aws.elbAttachSubnets,
			"DetachLoadBalancerFromSubnets":       aws.elbDetachSubnets,
		},
		unsupported: elbUnsupported,
		fault: func(status int, code, message string) *awsError {
			// ELB's own words for a throttled call and a failing one.
			switch status {
			case http.StatusTooManyRequests:
				return &awsError{status: http.StatusBadRequest, code: "Throttling", message: "Rate exceeded"}
			case http.StatusInternalServerError:
				code = "InternalFailure"
			}
			return &awsError{status: status, code: code, message: message}
		},
		writeError:  writeELBError,
		writeResult: writeELBResult,
	})
}

// writeELBResult answers <Action>Response holding <Action>Result and the
// request ID, as the Query protocol does.
func writeELBResult(w http.ResponseWriter, requestID, action string, resp any) {
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(xml.Header))
	enc := xml.NewEncoder(w)
	start := xml.StartElement{Name: xml.Name{Local: action + "Response"}, Attr: []xml.Attr{{Name: xml.Name{Local: "xmlns"}, Value: elbNamespace}}}
	_ = enc.EncodeToken(start)
	_ = enc.EncodeElement(resp, xml.StartElement{Name: xml.Name{Local: action + "Result"}})
	_ = enc.EncodeElement(struct {
		RequestID string `xml:"RequestId"`
	}{requestID}, xml.StartElement{Name: xml.Name{Local: "ResponseMetadata"}})
	_ = enc.EncodeToken(start.End())
	_ = enc.Flush()
}

func writeELBError(w http.ResponseWriter, requestID string, e *awsError) {
	// Sender: the caller's fault; Receiver: the service's.
	who := "Sender"
	if e.status >= http.StatusInternalServerError {
		who = "Receiver"
	}
	body := struct {
		XMLName xml.Name `xml:"ErrorResponse"`
		XMLNS   string   `xml:"xmlns,attr"`
		Error   struct {
			Type    string `xml:"Type"`
			Code    string `xml:"Code"`
			Message string `xml:"Message"`
		} `xml:"Error"`
		RequestID string `xml:"RequestId"`
	}{XMLNS: elbNamespace, RequestID: requestID}
	body.Error.Type, body.Error.Code, body.Error.Message = who, e.code, e.message
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(e.status)
	_, _ = w.Write([]byte(xml.Header))
	_ = xml.NewEncoder(w).Encode(body)
}

func elbValidationf(format string, args ...any) *awsError {
	return awsErrorf("ValidationError", format, args...)
}

// elbMembers reads a Query list parameter: <name>.member.1, .member.2, ...
func elbMembers(r *http.Request, name string) []string {
	return ec2List(r, name+".member")
}

// elbInt reads a required integer parameter within [lo, hi].
func elbInt(r *http.Request, name string, lo, hi int) (int32, error) {
	s := r.Form.Get(name)
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, elbValidationf("%s: %q is not an integer from %d to %d", name, s, lo, hi)
	}
	return int32(n), nil
}

// elbOptionalInt reads an optional integer parameter within [lo, hi].
func elbOptionalInt(r *http.Request, name string, lo, hi int) (n int32, given bool, err error) {
	if _, given = r.Form[name]; !given {
		return 0, false, nil
	}
	n, err = elbInt(r, name, lo, hi)
	return n, true, err
}

var elbNamePattern = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?$`)

// listenersOf are the generic model's listeners as ELB shows them, with the
// protocols and certificate d keeps for them; one d does not have (put
// through the cloud's own API) shows its own protocol on both sides.
func listenersOf(generic []simcloud.Listener, d classic) []ELBListener {
	var out []ELBListener
	for _, l := range generic {
		if i := slices.IndexFunc(d.Listeners, func(o ELBListener) bool { return genericListener(o) == l }); i >= 0 {
			out = append(out, d.Listeners[i])
			continue
		}
		out = append(out, ELBListener{Protocol: l.Protocol, LoadBalancerPort: l.Port, InstanceProtocol: l.Protocol, InstancePort: l.NodePort})
	}
	return out
}

// attributesOf are the attributes d keeps with the generic model's idle
// timeout.
func attributesOf(spec simcloud.LoadBalancerSpec, d classic) ELBAttributes {
	a := d.Attributes
	a.IdleTimeout = int32(spec.IdleTimeoutSeconds)
	return a
}

// elbNamed finds the classic load balancer LoadBalancerName names: a load
// balancer of the cloud's own API is none.
func (aws *AWS) elbNamed(r *http.Request) (simcloud.LoadBalancer, classic, error) {
	name := r.Form.Get("LoadBalancerName")
	if name == "" {
		return simcloud.LoadBalancer{}, classic{}, elbValidationf("LoadBalancerName is required")
	}
	lb, data, ok := aws.cloud.LoadBalancerWithData(name)
	d, isClassic := data.(classic)
	if !ok || !isClassic {
		return simcloud.LoadBalancer{}, classic{}, elbNotFound(name)
	}
	return lb, d, nil
}

func elbNotFound(name string) *awsError {
	return awsErrorf("LoadBalancerNotFound", "There is no ACTIVE Load Balancer named '%s'", name)
}

// changeELB applies change, in one step, to the generic spec and the classic
// data of the load balancer LoadBalancerName names, and answers it as ELB
// shows it after. change runs under the cloud's lock: it must not call the
// cloud (what it needs of the cloud is read before).
func (aws *AWS) changeELB(r *http.Request, change func(spec *simcloud.LoadBalancerSpec, d *classic) error) (ELB, error) {
	name := r.Form.Get("LoadBalancerName")
	if name == "" {
		return ELB{}, elbValidationf("LoadBalancerName is required")
	}
	lb, data, err := aws.cloud.ChangeLoadBalancer(name, func(spec *simcloud.LoadBalancerSpec, data any) (any, error) {
		d, ok := data.(classic)
		if !ok {
			return nil, elbNotFound(name)
		}
		d = d.clone()
		if err := change(spec, &d); err != nil {
			return nil, err
		}
		return d, nil
	})
	if err != nil {
		return ELB{}, elbCloudError(name, err)
	}
	return aws.elbOf(lb, data.(classic)), nil
}

// elbCloudError says an error of the sim cloud's load balancers in ELB's
// words.
func elbCloudError(name string, err error) error {
	var e *awsError
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, simcloud.ErrLBNotFound):
		return elbNotFound(name)
	case errors.Is(err, simcloud.ErrLBExists):
		return awsErrorf("DuplicateLoadBalancerName", "Load balancer %q exists, made through the sim cloud's own API", name)
	case errors.Is(err, simcloud.ErrLBQuota), errors.Is(err, simcloud.ErrIPNotAvailable):
		return awsErrorf("TooManyLoadBalancers", "%v", err)
	case errors.Is(err, simcloud.ErrInvalidLBSpec):
		return awsErrorf("InvalidConfigurationRequest", "%v", err)
	}
	return err
}
