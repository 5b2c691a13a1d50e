package awsemu

import (
	"net/http"
	"regexp"
	"slices"
	"strconv"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// The calls that change a classic ELB: its health check, instances,
// attributes, listeners, security groups and subnets. Each is one
// changeELB: the generic model's part and the classic data change together.

type elbHealthCheckResult struct {
	HealthCheck elbHealthCheckXML `xml:"HealthCheck"`
}

var elbTargetPattern = regexp.MustCompile(`^(?:(TCP|SSL):(\d+)|(HTTP|HTTPS):(\d+)(/.*))$`)

// elbConfigureHealthCheck replaces the health check, every field of which
// is required and within ELB's bounds.
func (aws *AWS) elbConfigureHealthCheck(r *http.Request) (any, error) {
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
	if _, err := aws.changeELB(r, func(_ *simcloud.LoadBalancerSpec, d *classic) error {
		d.HealthCheck = hc
		return nil
	}); err != nil {
		return nil, err
	}
	return &elbHealthCheckResult{HealthCheck: elbHealthCheckXML(hc)}, nil
}

type elbInstancesResult struct {
	Instances []elbInstance `xml:"Instances>member"`
}

// elbInstances reads Instances.member.N.InstanceId: instances of the cloud
// that are not terminated.
func (aws *AWS) elbInstances(r *http.Request) ([]simcloud.Instance, error) {
	var out []simcloud.Instance
	for i := 1; ; i++ {
		id, ok := r.Form["Instances.member."+strconv.Itoa(i)+".InstanceId"]
		if !ok {
			break
		}
		// Get finds instances by name too: only the ID counts here.
		in, ok := aws.cloud.Get(id[0])
		if !ok || in.ID != id[0] || in.State == simcloud.StateTerminated {
			return nil, awsErrorf("InvalidInstance", "The following instances are not valid: %s", id[0])
		}
		out = append(out, in)
	}
	if len(out) == 0 {
		return nil, elbValidationf("Instances are required")
	}
	return out, nil
}

// elbRegisterInstances adds instances behind the load balancer, as backends
// of the generic model, and answers all it has.
func (aws *AWS) elbRegisterInstances(r *http.Request) (any, error) {
	return aws.elbChangeInstances(r, func(have []simcloud.Backend, ins []simcloud.Instance) []simcloud.Backend {
		for _, in := range ins {
			if !slices.ContainsFunc(have, func(b simcloud.Backend) bool { return b.Node == in.Name }) {
				have = append(have, backendOf(in))
			}
		}
		return have
	})
}

// elbDeregisterInstances removes instances from behind the load balancer
// and answers those left.
func (aws *AWS) elbDeregisterInstances(r *http.Request) (any, error) {
	return aws.elbChangeInstances(r, func(have []simcloud.Backend, ins []simcloud.Instance) []simcloud.Backend {
		return slices.DeleteFunc(have, func(b simcloud.Backend) bool {
			return slices.ContainsFunc(ins, func(in simcloud.Instance) bool { return in.Name == b.Node })
		})
	})
}

// elbChangeInstances sets the backends of the load balancer r names to
// change(its backends, the instances r names) and answers its instances.
func (aws *AWS) elbChangeInstances(r *http.Request, change func(have []simcloud.Backend, ins []simcloud.Instance) []simcloud.Backend) (any, error) {
	aws.mu.Lock()
	defer aws.mu.Unlock()
	if _, _, err := aws.elbNamed(r); err != nil {
		return nil, err
	}
	ins, err := aws.elbInstances(r)
	if err != nil {
		return nil, err
	}
	e, err := aws.changeELB(r, func(spec *simcloud.LoadBalancerSpec, _ *classic) error {
		spec.Backends = change(spec.Backends, ins)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &elbInstancesResult{Instances: elbInstancesXML(e.Instances)}, nil
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

func (aws *AWS) elbDescribeAttributes(r *http.Request) (any, error) {
	lb, d, err := aws.elbNamed(r)
	if err != nil {
		return nil, err
	}
	return &elbAttributesResult{Attributes: elbAttributesOf(attributesOf(lb.LoadBalancerSpec, d))}, nil
}

// elbModifyAttributes changes the attributes given and keeps the others.
func (aws *AWS) elbModifyAttributes(r *http.Request) (any, error) {
	const p = "LoadBalancerAttributes."
	if ec2HasList(r, p+"AdditionalAttributes") {
		return nil, awsErrorf("LoadBalancerAttributeNotFound", "The sim cloud keeps no additional attributes")
	}
	aws.mu.Lock()
	defer aws.mu.Unlock()
	lb, d, err := aws.elbNamed(r)
	if err != nil {
		return nil, err
	}
	a := attributesOf(lb.LoadBalancerSpec, d)
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
	e, err := aws.changeELB(r, func(spec *simcloud.LoadBalancerSpec, d *classic) error {
		spec.IdleTimeoutSeconds = int(a.IdleTimeout)
		d.Attributes = a
		d.Attributes.IdleTimeout = 0
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &elbAttributesResult{LoadBalancerName: e.Name, Attributes: elbAttributesOf(e.Attributes)}, nil
}

// elbCreateListeners adds listeners; one the load balancer already has is
// kept, another on a port in use fails the call.
func (aws *AWS) elbCreateListeners(r *http.Request) (any, error) {
	listeners, err := elbListeners(r, "Listeners")
	if err != nil {
		return nil, err
	}
	if len(listeners) == 0 {
		return nil, elbValidationf("Listeners are required")
	}
	aws.mu.Lock()
	defer aws.mu.Unlock()
	if _, err := aws.changeELB(r, func(spec *simcloud.LoadBalancerSpec, d *classic) error {
		have := listenersOf(spec.Listeners, *d)
		for _, l := range listeners {
			i := slices.IndexFunc(have, func(o ELBListener) bool { return o.LoadBalancerPort == l.LoadBalancerPort })
			switch {
			case i < 0:
				have = append(have, l)
				spec.Listeners = append(spec.Listeners, genericListener(l))
				d.Listeners = append(d.Listeners, l)
			case have[i] != l:
				return awsErrorf("DuplicateListener", "A listener already exists for %s with LoadBalancerPort %d, but with a different configuration", r.Form.Get("LoadBalancerName"), l.LoadBalancerPort)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

// elbDeleteListeners removes the listeners on LoadBalancerPorts.member.N.
func (aws *AWS) elbDeleteListeners(r *http.Request) (any, error) {
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
	aws.mu.Lock()
	defer aws.mu.Unlock()
	if _, err := aws.changeELB(r, func(spec *simcloud.LoadBalancerSpec, d *classic) error {
		spec.Listeners = slices.DeleteFunc(spec.Listeners, func(l simcloud.Listener) bool { return slices.Contains(ports, l.Port) })
		d.Listeners = slices.DeleteFunc(d.Listeners, func(l ELBListener) bool { return slices.Contains(ports, l.LoadBalancerPort) })
		return nil
	}); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

type elbSecurityGroupsResult struct {
	SecurityGroups []string `xml:"SecurityGroups>member"`
}

// elbApplySecurityGroups replaces the load balancer's security groups.
func (aws *AWS) elbApplySecurityGroups(r *http.Request) (any, error) {
	groups := elbMembers(r, "SecurityGroups")
	if len(groups) == 0 {
		return nil, elbValidationf("SecurityGroups are required")
	}
	aws.mu.Lock()
	defer aws.mu.Unlock()
	if _, _, err := aws.elbNamed(r); err != nil {
		return nil, err
	}
	if err := aws.elbSecurityGroups(groups); err != nil {
		return nil, err
	}
	e, err := aws.changeELB(r, func(_ *simcloud.LoadBalancerSpec, d *classic) error {
		d.SecurityGroups = nil
		for _, g := range groups {
			if !slices.Contains(d.SecurityGroups, g) {
				d.SecurityGroups = append(d.SecurityGroups, g)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &elbSecurityGroupsResult{SecurityGroups: e.SecurityGroups}, nil
}

type elbSubnetsResult struct {
	Subnets []string `xml:"Subnets>member"`
}

// elbAttachSubnets adds subnets.
func (aws *AWS) elbAttachSubnets(r *http.Request) (any, error) {
	return aws.elbChangeSubnets(r, func(have, given []string) ([]string, error) {
		return aws.elbSubnets(append(slices.Clone(have), given...))
	})
}

// elbDetachSubnets removes subnets, not the last one.
func (aws *AWS) elbDetachSubnets(r *http.Request) (any, error) {
	return aws.elbChangeSubnets(r, func(have, given []string) ([]string, error) {
		out := slices.DeleteFunc(slices.Clone(have), func(s string) bool { return slices.Contains(given, s) })
		if len(out) == 0 {
			return nil, awsErrorf("InvalidConfigurationRequest", "A load balancer must keep at least one subnet")
		}
		return out, nil
	})
}

func (aws *AWS) elbChangeSubnets(r *http.Request, change func(have, given []string) ([]string, error)) (any, error) {
	given := elbMembers(r, "Subnets")
	if len(given) == 0 {
		return nil, elbValidationf("Subnets are required")
	}
	aws.mu.Lock()
	defer aws.mu.Unlock()
	e, err := aws.changeELB(r, func(_ *simcloud.LoadBalancerSpec, d *classic) error {
		subnets, err := change(d.Subnets, given)
		d.Subnets = subnets
		return err
	})
	if err != nil {
		return nil, err
	}
	return &elbSubnetsResult{Subnets: e.Subnets}, nil
}
