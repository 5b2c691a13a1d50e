package awsemu

import (
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// A classic ELB's life: CreateLoadBalancer (with what it reads),
// DescribeLoadBalancers and DeleteLoadBalancer.

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
func (aws *AWS) elbSubnets(ids []string) ([]string, error) {
	var out []string
	for _, id := range ids {
		if aws.subnetZoneIndex(id) < 0 {
			return nil, awsErrorf("SubnetNotFound", "The subnet %s does not exist", id)
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out, nil
}

// elbSecurityGroups checks that ids are security groups of the VPC; the
// caller holds aws.mu.
func (aws *AWS) elbSecurityGroups(ids []string) error {
	for _, id := range ids {
		if _, ok := aws.secGroups[id]; !ok {
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

func (aws *AWS) readELBCreate(r *http.Request) (elbCreate, error) {
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
			i := aws.zoneIndex(z)
			if i < 0 {
				return req, elbValidationf("Unknown Availability Zone %q", z)
			}
			req.subnets = append(req.subnets, aws.subnetID(i))
		}
	case len(req.subnets) == 0:
		return req, elbValidationf("Subnets or AvailabilityZones are required")
	}
	if req.subnets, err = aws.elbSubnets(req.subnets); err != nil {
		return req, err
	}
	req.securityGroups = elbMembers(r, "SecurityGroups")
	req.tags, err = elbTags(r)
	return req, err
}

type elbDNSResult struct {
	DNSName string `xml:"DNSName"`
}

// elbCreateLoadBalancer makes a load balancer of the sim cloud (a VIP from
// its pool, within its quota: TooManyLoadBalancers) with classic data: in
// the VPC's subnets, in the VPC's default security group unless given
// others, with ELB's default health check (TCP on the first listener's
// instance port) and attributes. Asked again for one that exists with the
// same listeners, it answers its DNS name, as ELB does.
func (aws *AWS) elbCreateLoadBalancer(r *http.Request) (any, error) {
	req, err := aws.readELBCreate(r)
	if err != nil {
		return nil, err
	}
	aws.mu.Lock()
	defer aws.mu.Unlock()
	if lb, data, ok := aws.cloud.LoadBalancerWithData(req.name); ok {
		d, isClassic := data.(classic)
		if !isClassic {
			return nil, elbCloudError(req.name, simcloud.ErrLBExists)
		}
		if !slices.Equal(aws.elbOf(lb, d).Listeners, req.listeners) {
			return nil, awsErrorf("DuplicateLoadBalancerName", "Load balancer %q exists with other listeners", req.name)
		}
		return &elbDNSResult{DNSName: d.DNSName}, nil
	}
	if len(req.securityGroups) == 0 {
		req.securityGroups = []string{aws.defaultSecurityGroupID()}
	}
	if err := aws.elbSecurityGroups(req.securityGroups); err != nil {
		return nil, err
	}
	aws.nextELB++
	spec := simcloud.LoadBalancerSpec{Tags: req.tags, Backends: []simcloud.Backend{}, IdleTimeoutSeconds: 60}
	for _, l := range req.listeners {
		spec.Listeners = append(spec.Listeners, genericListener(l))
	}
	d := classic{
		DNSName: aws.elbDNSName(req.name, req.scheme), Scheme: req.scheme, VpcID: aws.vpcID(),
		Subnets: req.subnets, SecurityGroups: req.securityGroups, Listeners: req.listeners,
		HealthCheck: ELBHealthCheck{
			Target:   "TCP:" + strconv.Itoa(int(req.listeners[0].InstancePort)),
			Interval: 30, Timeout: 5, HealthyThreshold: 10, UnhealthyThreshold: 2,
		},
		Attributes: ELBAttributes{ConnectionDrainingTimeout: 300},
		Created:    time.Now().UTC(),
	}
	if _, err := aws.cloud.CreateLoadBalancerWithData(req.name, spec, d); err != nil {
		return nil, elbCloudError(req.name, err)
	}
	return &elbDNSResult{DNSName: d.DNSName}, nil
}

// elbDNSName is the name ELB gives a new load balancer: its name, a number
// of its own, the region; "internal-" first for an internal one.
func (aws *AWS) elbDNSName(name, scheme string) string {
	h := fnv.New32a()
	_, _ = fmt.Fprintf(h, "%s/%s/%d", aws.region, name, aws.nextELB)
	dns := fmt.Sprintf("%s-%d.%s.elb.amazonaws.com", name, 1_000_000_000+h.Sum32()%1_000_000_000, aws.region)
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

// elbDescribe describes v as ELB does; the caller holds aws.mu.
func (aws *AWS) elbDescribe(v ELB) elbDescription {
	d := elbDescription{
		LoadBalancerName: v.Name, DNSName: v.DNSName, Subnets: v.Subnets, VPCID: v.VpcID,
		CanonicalHostedZoneNameID: "Z" + strings.ToUpper(shortHash(aws.region + "/elb"))[:13],
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
		if i := aws.subnetZoneIndex(s); i >= 0 {
			d.AvailabilityZones = append(d.AvailabilityZones, aws.zones[i])
		}
	}
	d.SourceSecurityGroup.OwnerAlias = ec2OwnerID
	if g, ok := aws.secGroups[v.SecurityGroups[0]]; ok {
		d.SourceSecurityGroup.GroupName = g.Name
	}
	return d
}

// elbDescribeLoadBalancers describes the load balancers LoadBalancerNames
// names, every one of which must exist, or all of them, PageSize at a time
// (Marker: where the last page ended).
func (aws *AWS) elbDescribeLoadBalancers(r *http.Request) (any, error) {
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
	aws.mu.Lock()
	defer aws.mu.Unlock()
	all := map[string]ELB{}
	for _, e := range aws.ELBs() {
		all[e.Name] = e
	}
	for _, n := range names {
		if _, ok := all[n]; !ok {
			return nil, elbNotFound(n)
		}
	}
	if len(names) == 0 {
		for n := range all {
			names = append(names, n)
		}
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
		res.Descriptions = append(res.Descriptions, aws.elbDescribe(all[n]))
	}
	return res, nil
}

// elbDeleteLoadBalancer deletes a classic load balancer from the sim cloud;
// one that does not exist is already deleted, as ELB answers, and so is one
// of the cloud's own API, which is not ELB's to delete.
func (aws *AWS) elbDeleteLoadBalancer(r *http.Request) (any, error) {
	aws.mu.Lock()
	defer aws.mu.Unlock()
	if _, _, err := aws.elbNamed(r); err != nil {
		if e, ok := err.(*awsError); ok && e.code == "LoadBalancerNotFound" {
			return struct{}{}, nil
		}
		return nil, err
	}
	err := aws.cloud.DeleteLoadBalancer(r.Form.Get("LoadBalancerName"), nil)
	if err != nil && !errors.Is(err, simcloud.ErrLBNotFound) {
		return nil, err
	}
	return struct{}{}, nil
}
