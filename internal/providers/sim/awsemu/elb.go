package awsemu

import (
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"hash/fnv"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ELBPath is where the cloud serves Elastic Load Balancing's Query API for
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

// ELB is a Classic Load Balancer, as Elastic Load Balancing makes it.
//
// ELBs are kept apart from the cloud's own load balancers (PutLoadBalancer),
// not stored as ones: an ELB has a DNS name instead of a VIP from the pool,
// HTTP and SSL listeners besides TCP, security groups, subnets, a health
// check and instances registered by ID, none of which the native model has;
// and the native API's users (the sim provider, the chaos invariants) would
// find load balancers there that they did not make.
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

// ELBs lists the classic load balancers sorted by name.
func (c *Cloud) ELBs() []ELB {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]ELB, 0, len(c.elbs))
	for _, name := range slices.Sorted(maps.Keys(c.elbs)) {
		out = append(out, c.elbView(c.elbs[name]))
	}
	return out
}

// elbView is a copy of e as ELB shows it, without the instances that are
// gone; the caller holds c.mu.
func (c *Cloud) elbView(e *ELB) ELB {
	out := *e
	out.Subnets = slices.Clone(e.Subnets)
	out.SecurityGroups = slices.Clone(e.SecurityGroups)
	out.Listeners = slices.Clone(e.Listeners)
	out.Tags = maps.Clone(e.Tags)
	out.Instances = nil
	for _, id := range e.Instances {
		if in, ok := c.instances[id]; ok && in.State != StateTerminated {
			out.Instances = append(out.Instances, id)
		}
	}
	return out
}

func (c *Cloud) elbHandler(w http.ResponseWriter, r *http.Request) {
	c.serveQuery(w, r, queryAPI{
		service: "ELB",
		actions: map[string]queryAction{
			"CreateLoadBalancer":                  c.elbCreateLoadBalancer,
			"DescribeLoadBalancers":               c.elbDescribeLoadBalancers,
			"DeleteLoadBalancer":                  c.elbDeleteLoadBalancer,
			"ConfigureHealthCheck":                c.elbConfigureHealthCheck,
			"RegisterInstancesWithLoadBalancer":   c.elbRegisterInstances,
			"DeregisterInstancesFromLoadBalancer": c.elbDeregisterInstances,
			"DescribeLoadBalancerAttributes":      c.elbDescribeAttributes,
			"ModifyLoadBalancerAttributes":        c.elbModifyAttributes,
			"CreateLoadBalancerListeners":         c.elbCreateListeners,
			"DeleteLoadBalancerListeners":         c.elbDeleteListeners,
			"ApplySecurityGroupsToLoadBalancer":   c.elbApplySecurityGroups,
			"AttachLoadBalancerToSubnets":         c.elbAttachSubnets,
			"DetachLoadBalancerFromSubnets":       c.elbDetachSubnets,
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

// elbNamed finds the load balancer LoadBalancerName names; the caller holds
// c.mu.
func (c *Cloud) elbNamed(r *http.Request) (*ELB, error) {
	name := r.Form.Get("LoadBalancerName")
	if name == "" {
		return nil, elbValidationf("LoadBalancerName is required")
	}
	e, ok := c.elbs[name]
	if !ok {
		return nil, awsErrorf("LoadBalancerNotFound", "There is no ACTIVE Load Balancer named '%s'", name)
	}
	return e, nil
}

// elbListeners reads <prefix>.member.N as listeners: the protocols in
// upper case, the instance protocol the listener's own when not given.
func elbListeners(r *http.Request, prefix string) ([]ELBListener, error) {
	var out []ELBListener
	for i := 1; ; i++ {
		p := prefix + ".member." + strconv.Itoa(i)
		if _, ok := r.Form[p+".Protocol"]; !ok {
			return out, nil
		}
		l := ELBListener{
			Protocol:         strings.ToUpper(r.Form.Get(p + ".Protocol")),
			InstanceProtocol: strings.ToUpper(r.Form.Get(p + ".InstanceProtocol")),
			SSLCertificateID: r.Form.Get(p + ".SSLCertificateId"),
		}
		if l.InstanceProtocol == "" {
			l.InstanceProtocol = l.Protocol
		}
		var err error
		if l.LoadBalancerPort, err = elbInt(r, p+".LoadBalancerPort", 1, 65535); err != nil {
			return nil, err
		}
		if l.InstancePort, err = elbInt(r, p+".InstancePort", 1, 65535); err != nil {
			return nil, err
		}
		if err := l.validate(); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
}

// elbLayers are the protocols a listener speaks, by the layer ELB balances
// them at: a listener's two sides must be at the same one.
var elbLayers = map[string]int{"HTTP": 7, "HTTPS": 7, "TCP": 4, "SSL": 4}

func (l ELBListener) validate() error {
	front, ok := elbLayers[l.Protocol]
	if !ok {
		return awsErrorf("UnsupportedProtocol", "Listener protocol %q is not supported: use HTTP, HTTPS, TCP or SSL", l.Protocol)
	}
	back, ok := elbLayers[l.InstanceProtocol]
	if !ok {
		return awsErrorf("UnsupportedProtocol", "Instance protocol %q is not supported: use HTTP, HTTPS, TCP or SSL", l.InstanceProtocol)
	}
	if front != back {
		return awsErrorf("InvalidConfigurationRequest", "Listener on port %d: protocol %s cannot forward to instance protocol %s", l.LoadBalancerPort, l.Protocol, l.InstanceProtocol)
	}
	if (l.Protocol == "HTTPS" || l.Protocol == "SSL") != (l.SSLCertificateID != "") {
		return awsErrorf("InvalidConfigurationRequest", "Listener on port %d: an SSL certificate is required for HTTPS and SSL, and only for them", l.LoadBalancerPort)
	}
	return nil
}

// elbSubnets checks that ids are subnets of the VPC (which has one per
// zone) and drops repeats.
func (c *Cloud) elbSubnets(ids []string) ([]string, error) {
	var out []string
	for _, id := range ids {
		if c.subnetZoneIndex(id) < 0 {
			return nil, awsErrorf("SubnetNotFound", "The subnet %s does not exist", id)
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out, nil
}

// elbSecurityGroups checks that ids are security groups of the VPC; the
// caller holds c.mu.
func (c *Cloud) elbSecurityGroups(ids []string) error {
	for _, id := range ids {
		if _, ok := c.secGroups[id]; !ok {
			return awsErrorf("InvalidSecurityGroup", "Security group %q does not exist", id)
		}
	}
	return nil
}

// elbTags reads Tags.member.N.Key and .Value.
func elbTags(r *http.Request) (map[string]string, error) {
	tags := map[string]string{}
	for i := 1; ; i++ {
		p := "Tags.member." + strconv.Itoa(i)
		k, ok := r.Form[p+".Key"]
		if !ok {
			break
		}
		if k[0] == "" || len(k[0]) > 128 || len(r.Form.Get(p+".Value")) > 256 {
			return nil, elbValidationf("%s: a key of 1 to 128 characters and a value of at most 256", p)
		}
		if _, dup := tags[k[0]]; dup {
			return nil, awsErrorf("DuplicateTagKeys", "Tag key %q is given twice", k[0])
		}
		tags[k[0]] = r.Form.Get(p + ".Value")
	}
	if len(tags) > 50 {
		return nil, awsErrorf("TooManyTags", "A load balancer has at most 50 tags, not %d", len(tags))
	}
	return tags, nil
}

// elbCreate is a CreateLoadBalancer request, read and checked.
type elbCreate struct {
	name, scheme            string
	listeners               []ELBListener
	subnets, securityGroups []string
	tags                    map[string]string
}

func (c *Cloud) readELBCreate(r *http.Request) (elbCreate, error) {
	req := elbCreate{name: r.Form.Get("LoadBalancerName"), scheme: r.Form.Get("Scheme")}
	if !elbNamePattern.MatchString(req.name) {
		return req, elbValidationf("LoadBalancerName %q: 1 to 32 letters, digits and hyphens, not beginning or ending with a hyphen", req.name)
	}
	switch req.scheme {
	case "":
		req.scheme = "internet-facing"
	case "internet-facing", "internal":
	default:
		return req, awsErrorf("InvalidScheme", "Scheme %q: use internet-facing or internal", req.scheme)
	}
	var err error
	if req.listeners, err = elbListeners(r, "Listeners"); err != nil {
		return req, err
	}
	if len(req.listeners) == 0 {
		return req, elbValidationf("Listeners are required")
	}
	for i, l := range req.listeners {
		if slices.ContainsFunc(req.listeners[:i], func(o ELBListener) bool { return o.LoadBalancerPort == l.LoadBalancerPort }) {
			return req, awsErrorf("DuplicateListener", "Two listeners on port %d", l.LoadBalancerPort)
		}
	}
	req.subnets = elbMembers(r, "Subnets")
	zones := elbMembers(r, "AvailabilityZones")
	switch {
	case len(req.subnets) > 0 && len(zones) > 0:
		return req, elbValidationf("Give Subnets or AvailabilityZones, not both")
	case len(zones) > 0:
		// A zone stands for the VPC's subnet in it.
		for _, z := range zones {
			i := c.zoneIndex(z)
			if i < 0 {
				return req, elbValidationf("Unknown Availability Zone %q", z)
			}
			req.subnets = append(req.subnets, c.subnetID(i))
		}
	case len(req.subnets) == 0:
		return req, elbValidationf("Subnets or AvailabilityZones are required")
	}
	if req.subnets, err = c.elbSubnets(req.subnets); err != nil {
		return req, err
	}
	req.securityGroups = elbMembers(r, "SecurityGroups")
	req.tags, err = elbTags(r)
	return req, err
}

type elbDNSResult struct {
	DNSName string `xml:"DNSName"`
}

// elbCreateLoadBalancer makes a load balancer in the VPC's subnets, in the
// VPC's default security group unless given others, with ELB's default
// health check (TCP on the first listener's instance port) and attributes.
// Asked again for one that exists with the same listeners, it answers its
// DNS name, as ELB does.
func (c *Cloud) elbCreateLoadBalancer(r *http.Request) (any, error) {
	req, err := c.readELBCreate(r)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.elbs[req.name]; ok {
		if !slices.Equal(e.Listeners, req.listeners) {
			return nil, awsErrorf("DuplicateLoadBalancerName", "Load balancer %q exists with other listeners", req.name)
		}
		return &elbDNSResult{DNSName: e.DNSName}, nil
	}
	if len(req.securityGroups) == 0 {
		req.securityGroups = []string{c.defaultSecurityGroupID()}
	}
	if err := c.elbSecurityGroups(req.securityGroups); err != nil {
		return nil, err
	}
	c.nextELB++
	e := &ELB{
		Name: req.name, DNSName: c.elbDNSName(req.name, req.scheme), Scheme: req.scheme, VpcID: c.vpcID(),
		Subnets: req.subnets, SecurityGroups: req.securityGroups, Listeners: req.listeners, Tags: req.tags,
		HealthCheck: ELBHealthCheck{
			Target:   "TCP:" + strconv.Itoa(int(req.listeners[0].InstancePort)),
			Interval: 30, Timeout: 5, HealthyThreshold: 10, UnhealthyThreshold: 2,
		},
		Attributes: ELBAttributes{IdleTimeout: 60, ConnectionDrainingTimeout: 300},
		Created:    time.Now().UTC(),
	}
	c.elbs[e.Name] = e
	return &elbDNSResult{DNSName: e.DNSName}, nil
}

// elbDNSName is the name ELB gives a new load balancer: its name, a number
// of its own, the region; "internal-" first for an internal one.
func (c *Cloud) elbDNSName(name, scheme string) string {
	h := fnv.New32a()
	_, _ = fmt.Fprintf(h, "%s/%s/%d", c.region, name, c.nextELB)
	dns := fmt.Sprintf("%s-%d.%s.elb.amazonaws.com", name, 1_000_000_000+h.Sum32()%1_000_000_000, c.region)
	if scheme == "internal" {
		return "internal-" + dns
	}
	return dns
}

type elbDescribeResult struct {
	Descriptions []elbDescription `xml:"LoadBalancerDescriptions>member"`
	NextMarker   string           `xml:"NextMarker,omitempty"`
}

type elbDescription struct {
	LoadBalancerName          string                   `xml:"LoadBalancerName"`
	DNSName                   string                   `xml:"DNSName"`
	CanonicalHostedZoneName   string                   `xml:"CanonicalHostedZoneName,omitempty"`
	CanonicalHostedZoneNameID string                   `xml:"CanonicalHostedZoneNameID"`
	ListenerDescriptions      []elbListenerDescription `xml:"ListenerDescriptions>member"`
	Policies                  struct{}                 `xml:"Policies"`
	AvailabilityZones         []string                 `xml:"AvailabilityZones>member"`
	Subnets                   []string                 `xml:"Subnets>member"`
	VPCID                     string                   `xml:"VPCId"`
	Instances                 []elbInstance            `xml:"Instances>member"`
	HealthCheck               elbHealthCheckXML        `xml:"HealthCheck"`
	SourceSecurityGroup       struct {
		OwnerAlias string `xml:"OwnerAlias"`
		GroupName  string `xml:"GroupName"`
	} `xml:"SourceSecurityGroup"`
	SecurityGroups []string `xml:"SecurityGroups>member"`
	CreatedTime    string   `xml:"CreatedTime"`
	Scheme         string   `xml:"Scheme"`
}

type elbListenerDescription struct {
	Listener    elbListenerXML `xml:"Listener"`
	PolicyNames []string       `xml:"PolicyNames>member"`
}

type elbListenerXML struct {
	Protocol         string `xml:"Protocol"`
	LoadBalancerPort int32  `xml:"LoadBalancerPort"`
	InstanceProtocol string `xml:"InstanceProtocol"`
	InstancePort     int32  `xml:"InstancePort"`
	SSLCertificateID string `xml:"SSLCertificateId,omitempty"`
}

type elbInstance struct {
	InstanceID string `xml:"InstanceId"`
}

type elbHealthCheckXML struct {
	Target             string `xml:"Target"`
	Interval           int32  `xml:"Interval"`
	Timeout            int32  `xml:"Timeout"`
	HealthyThreshold   int32  `xml:"HealthyThreshold"`
	UnhealthyThreshold int32  `xml:"UnhealthyThreshold"`
}

func elbInstancesXML(ids []string) []elbInstance {
	out := make([]elbInstance, 0, len(ids))
	for _, id := range ids {
		out = append(out, elbInstance{InstanceID: id})
	}
	return out
}

// elbDescribe describes e as ELB does; the caller holds c.mu.
func (c *Cloud) elbDescribe(e *ELB) elbDescription {
	v := c.elbView(e)
	d := elbDescription{
		LoadBalancerName: v.Name, DNSName: v.DNSName, Subnets: v.Subnets, VPCID: v.VpcID,
		CanonicalHostedZoneNameID: "Z" + strings.ToUpper(shortHash(c.region + "/elb"))[:13],
		Instances:                 elbInstancesXML(v.Instances),
		HealthCheck:               elbHealthCheckXML(v.HealthCheck),
		SecurityGroups:            v.SecurityGroups,
		CreatedTime:               v.Created.Format("2006-01-02T15:04:05.000Z"),
		Scheme:                    v.Scheme,
	}
	if v.Scheme == "internet-facing" {
		d.CanonicalHostedZoneName = v.DNSName
	}
	for _, l := range v.Listeners {
		d.ListenerDescriptions = append(d.ListenerDescriptions, elbListenerDescription{Listener: elbListenerXML(l), PolicyNames: []string{}})
	}
	for _, s := range v.Subnets {
		if i := c.subnetZoneIndex(s); i >= 0 {
			d.AvailabilityZones = append(d.AvailabilityZones, c.zones[i])
		}
	}
	d.SourceSecurityGroup.OwnerAlias = ec2OwnerID
	if g, ok := c.secGroups[v.SecurityGroups[0]]; ok {
		d.SourceSecurityGroup.GroupName = g.Name
	}
	return d
}

// elbDescribeLoadBalancers describes the load balancers LoadBalancerNames
// names, every one of which must exist, or all of them, PageSize at a time
// (Marker: where the last page ended).
func (c *Cloud) elbDescribeLoadBalancers(r *http.Request) (any, error) {
	names := elbMembers(r, "LoadBalancerNames")
	if len(names) > 20 {
		return nil, elbValidationf("At most 20 LoadBalancerNames, not %d", len(names))
	}
	pageSize, paged, err := elbOptionalInt(r, "PageSize", 1, 400)
	if err != nil {
		return nil, err
	}
	after := ""
	if m := r.Form.Get("Marker"); m != "" {
		b, err := base64.RawURLEncoding.DecodeString(m)
		if err != nil {
			return nil, elbValidationf("Invalid Marker %q", m)
		}
		after = string(b)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		if _, ok := c.elbs[n]; !ok {
			return nil, awsErrorf("LoadBalancerNotFound", "There is no ACTIVE Load Balancer named '%s'", n)
		}
	}
	if len(names) == 0 {
		names = slices.Collect(maps.Keys(c.elbs))
	}
	slices.Sort(names)
	names = slices.Compact(names)
	res := &elbDescribeResult{Descriptions: []elbDescription{}}
	for _, n := range names {
		if n <= after {
			continue
		}
		if paged && len(res.Descriptions) == int(pageSize) {
			res.NextMarker = base64.RawURLEncoding.EncodeToString([]byte(res.Descriptions[len(res.Descriptions)-1].LoadBalancerName))
			break
		}
		res.Descriptions = append(res.Descriptions, c.elbDescribe(c.elbs[n]))
	}
	return res, nil
}

// elbDeleteLoadBalancer deletes a load balancer; one that does not exist
// is already deleted, as ELB answers.
func (c *Cloud) elbDeleteLoadBalancer(r *http.Request) (any, error) {
	name := r.Form.Get("LoadBalancerName")
	if name == "" {
		return nil, elbValidationf("LoadBalancerName is required")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.elbs, name)
	return struct{}{}, nil
}

type elbHealthCheckResult struct {
	HealthCheck elbHealthCheckXML `xml:"HealthCheck"`
}

var elbTargetPattern = regexp.MustCompile(`^(?:(TCP|SSL):(\d+)|(HTTP|HTTPS):(\d+)(/.*))$`)

// elbConfigureHealthCheck replaces the health check, every field of which
// is required and within ELB's bounds.
func (c *Cloud) elbConfigureHealthCheck(r *http.Request) (any, error) {
	hc := ELBHealthCheck{Target: r.Form.Get("HealthCheck.Target")}
	m := elbTargetPattern.FindStringSubmatch(hc.Target)
	if m == nil {
		return nil, elbValidationf("HealthCheck.Target %q: TCP:port, SSL:port, HTTP:port/path or HTTPS:port/path", hc.Target)
	}
	if p, _ := strconv.Atoi(m[2] + m[4]); p < 1 || p > 65535 {
		return nil, elbValidationf("HealthCheck.Target %q: port out of range", hc.Target)
	}
	var err error
	for _, f := range []struct {
		name   string
		dst    *int32
		lo, hi int
	}{
		{"Interval", &hc.Interval, 5, 300}, {"Timeout", &hc.Timeout, 2, 60},
		{"HealthyThreshold", &hc.HealthyThreshold, 2, 10}, {"UnhealthyThreshold", &hc.UnhealthyThreshold, 2, 10},
	} {
		if *f.dst, err = elbInt(r, "HealthCheck."+f.name, f.lo, f.hi); err != nil {
			return nil, err
		}
	}
	if hc.Timeout >= hc.Interval {
		return nil, elbValidationf("HealthCheck.Timeout (%d) must be less than HealthCheck.Interval (%d)", hc.Timeout, hc.Interval)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, err := c.elbNamed(r)
	if err != nil {
		return nil, err
	}
	e.HealthCheck = hc
	return &elbHealthCheckResult{HealthCheck: elbHealthCheckXML(hc)}, nil
}

type elbInstancesResult struct {
	Instances []elbInstance `xml:"Instances>member"`
}

// elbInstanceIDs reads Instances.member.N.InstanceId: instances of the
// cloud that are not terminated. The caller holds c.mu.
func (c *Cloud) elbInstanceIDs(r *http.Request) ([]string, error) {
	var ids []string
	for i := 1; ; i++ {
		id, ok := r.Form["Instances.member."+strconv.Itoa(i)+".InstanceId"]
		if !ok {
			break
		}
		in, ok := c.instances[id[0]]
		if !ok || in.State == StateTerminated {
			return nil, awsErrorf("InvalidInstance", "The following instances are not valid: %s", id[0])
		}
		ids = append(ids, id[0])
	}
	if len(ids) == 0 {
		return nil, elbValidationf("Instances are required")
	}
	return ids, nil
}

// elbRegisterInstances adds instances behind the load balancer and answers
// all it has.
func (c *Cloud) elbRegisterInstances(r *http.Request) (any, error) {
	return c.elbChangeInstances(r, func(have, ids []string) []string {
		for _, id := range ids {
			if !slices.Contains(have, id) {
				have = append(have, id)
			}
		}
		return have
	})
}

// elbDeregisterInstances removes instances from behind the load balancer
// and answers those left.
func (c *Cloud) elbDeregisterInstances(r *http.Request) (any, error) {
	return c.elbChangeInstances(r, func(have, ids []string) []string {
		return slices.DeleteFunc(have, func(id string) bool { return slices.Contains(ids, id) })
	})
}

// elbChangeInstances sets the instances of the load balancer r names to
// change(its instances, the instances r names) and answers them.
func (c *Cloud) elbChangeInstances(r *http.Request, change func(have, ids []string) []string) (any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, err := c.elbNamed(r)
	if err != nil {
		return nil, err
	}
	ids, err := c.elbInstanceIDs(r)
	if err != nil {
		return nil, err
	}
	e.Instances = change(e.Instances, ids)
	return &elbInstancesResult{Instances: elbInstancesXML(c.elbView(e).Instances)}, nil
}

type elbAttributesXML struct {
	AccessLog struct {
		Enabled        bool   `xml:"Enabled"`
		S3BucketName   string `xml:"S3BucketName,omitempty"`
		S3BucketPrefix string `xml:"S3BucketPrefix,omitempty"`
		EmitInterval   int32  `xml:"EmitInterval,omitempty"`
	} `xml:"AccessLog"`
	ConnectionDraining struct {
		Enabled bool  `xml:"Enabled"`
		Timeout int32 `xml:"Timeout"`
	} `xml:"ConnectionDraining"`
	ConnectionSettings struct {
		IdleTimeout int32 `xml:"IdleTimeout"`
	} `xml:"ConnectionSettings"`
	CrossZoneLoadBalancing struct {
		Enabled bool `xml:"Enabled"`
	} `xml:"CrossZoneLoadBalancing"`
}

func elbAttributesOf(a ELBAttributes) elbAttributesXML {
	var x elbAttributesXML
	x.AccessLog.Enabled, x.AccessLog.S3BucketName, x.AccessLog.S3BucketPrefix = a.AccessLog, a.AccessLogBucket, a.AccessLogPrefix
	if a.AccessLog {
		x.AccessLog.EmitInterval = a.AccessLogEmitInterval
	}
	x.ConnectionDraining.Enabled, x.ConnectionDraining.Timeout = a.ConnectionDraining, a.ConnectionDrainingTimeout
	x.ConnectionSettings.IdleTimeout = a.IdleTimeout
	x.CrossZoneLoadBalancing.Enabled = a.CrossZone
	return x
}

type elbAttributesResult struct {
	LoadBalancerName string           `xml:"LoadBalancerName,omitempty"`
	Attributes       elbAttributesXML `xml:"LoadBalancerAttributes"`
}

func (c *Cloud) elbDescribeAttributes(r *http.Request) (any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, err := c.elbNamed(r)
	if err != nil {
		return nil, err
	}
	return &elbAttributesResult{Attributes: elbAttributesOf(e.Attributes)}, nil
}

// elbModifyAttributes changes the attributes given and keeps the others.
func (c *Cloud) elbModifyAttributes(r *http.Request) (any, error) {
	const p = "LoadBalancerAttributes."
	if ec2HasList(r, p+"AdditionalAttributes") {
		return nil, awsErrorf("LoadBalancerAttributeNotFound", "The sim cloud keeps no additional attributes")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, err := c.elbNamed(r)
	if err != nil {
		return nil, err
	}
	a := e.Attributes
	for _, b := range []struct {
		name string
		dst  *bool
	}{{"AccessLog.Enabled", &a.AccessLog}, {"ConnectionDraining.Enabled", &a.ConnectionDraining}, {"CrossZoneLoadBalancing.Enabled", &a.CrossZone}} {
		if s, ok := r.Form[p+b.name]; ok {
			if *b.dst, err = strconv.ParseBool(s[0]); err != nil {
				return nil, elbValidationf("%s%s: %q is not a boolean", p, b.name, s[0])
			}
		}
	}
	for _, n := range []struct {
		name   string
		dst    *int32
		lo, hi int
	}{{"ConnectionDraining.Timeout", &a.ConnectionDrainingTimeout, 1, 3600}, {"ConnectionSettings.IdleTimeout", &a.IdleTimeout, 1, 4000}, {"AccessLog.EmitInterval", &a.AccessLogEmitInterval, 5, 60}} {
		v, given, err := elbOptionalInt(r, p+n.name, n.lo, n.hi)
		if err != nil {
			return nil, err
		}
		if given {
			*n.dst = v
		}
	}
	if s, ok := r.Form[p+"AccessLog.S3BucketName"]; ok {
		a.AccessLogBucket = s[0]
	}
	if s, ok := r.Form[p+"AccessLog.S3BucketPrefix"]; ok {
		a.AccessLogPrefix = s[0]
	}
	if a.AccessLog && a.AccessLogBucket == "" {
		return nil, awsErrorf("InvalidConfigurationRequest", "Access logs need an S3 bucket")
	}
	e.Attributes = a
	return &elbAttributesResult{LoadBalancerName: e.Name, Attributes: elbAttributesOf(a)}, nil
}

// elbCreateListeners adds listeners; one the load balancer already has is
// kept, another on a port in use fails the call.
func (c *Cloud) elbCreateListeners(r *http.Request) (any, error) {
	listeners, err := elbListeners(r, "Listeners")
	if err != nil {
		return nil, err
	}
	if len(listeners) == 0 {
		return nil, elbValidationf("Listeners are required")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, err := c.elbNamed(r)
	if err != nil {
		return nil, err
	}
	add := slices.Clone(e.Listeners)
	for _, l := range listeners {
		i := slices.IndexFunc(add, func(o ELBListener) bool { return o.LoadBalancerPort == l.LoadBalancerPort })
		switch {
		case i < 0:
			add = append(add, l)
		case add[i] != l:
			return nil, awsErrorf("DuplicateListener", "A listener already exists for %s with LoadBalancerPort %d, but with a different configuration", e.Name, l.LoadBalancerPort)
		}
	}
	e.Listeners = add
	return struct{}{}, nil
}

// elbDeleteListeners removes the listeners on LoadBalancerPorts.member.N.
func (c *Cloud) elbDeleteListeners(r *http.Request) (any, error) {
	var ports []int32
	for i := range elbMembers(r, "LoadBalancerPorts") {
		p, err := elbInt(r, "LoadBalancerPorts.member."+strconv.Itoa(i+1), 1, 65535)
		if err != nil {
			return nil, err
		}
		ports = append(ports, p)
	}
	if len(ports) == 0 {
		return nil, elbValidationf("LoadBalancerPorts are required")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, err := c.elbNamed(r)
	if err != nil {
		return nil, err
	}
	e.Listeners = slices.DeleteFunc(e.Listeners, func(l ELBListener) bool { return slices.Contains(ports, l.LoadBalancerPort) })
	return struct{}{}, nil
}

type elbSecurityGroupsResult struct {
	SecurityGroups []string `xml:"SecurityGroups>member"`
}

// elbApplySecurityGroups replaces the load balancer's security groups.
func (c *Cloud) elbApplySecurityGroups(r *http.Request) (any, error) {
	groups := elbMembers(r, "SecurityGroups")
	if len(groups) == 0 {
		return nil, elbValidationf("SecurityGroups are required")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, err := c.elbNamed(r)
	if err != nil {
		return nil, err
	}
	if err := c.elbSecurityGroups(groups); err != nil {
		return nil, err
	}
	e.SecurityGroups = nil
	for _, g := range groups {
		if !slices.Contains(e.SecurityGroups, g) {
			e.SecurityGroups = append(e.SecurityGroups, g)
		}
	}
	return &elbSecurityGroupsResult{SecurityGroups: e.SecurityGroups}, nil
}

type elbSubnetsResult struct {
	Subnets []string `xml:"Subnets>member"`
}

// elbAttachSubnets adds subnets.
func (c *Cloud) elbAttachSubnets(r *http.Request) (any, error) {
	return c.elbChangeSubnets(r, func(have, given []string) ([]string, error) {
		return c.elbSubnets(append(slices.Clone(have), given...))
	})
}

// elbDetachSubnets removes subnets, not the last one.
func (c *Cloud) elbDetachSubnets(r *http.Request) (any, error) {
	return c.elbChangeSubnets(r, func(have, given []string) ([]string, error) {
		out := slices.DeleteFunc(slices.Clone(have), func(s string) bool { return slices.Contains(given, s) })
		if len(out) == 0 {
			return nil, awsErrorf("InvalidConfigurationRequest", "A load balancer must keep at least one subnet")
		}
		return out, nil
	})
}

func (c *Cloud) elbChangeSubnets(r *http.Request, change func(have, given []string) ([]string, error)) (any, error) {
	given := elbMembers(r, "Subnets")
	if len(given) == 0 {
		return nil, elbValidationf("Subnets are required")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, err := c.elbNamed(r)
	if err != nil {
		return nil, err
	}
	subnets, err := change(e.Subnets, given)
	if err != nil {
		return nil, err
	}
	e.Subnets = subnets
	return &elbSubnetsResult{Subnets: subnets}, nil
}
