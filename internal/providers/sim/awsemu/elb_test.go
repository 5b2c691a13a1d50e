package awsemu

import (
	"encoding/xml"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// elbCall posts an Elastic Load Balancing Query API call.
func elbCall(t *testing.T, srv *httptest.Server, form url.Values, signed bool) (int, string) {
	t.Helper()
	return queryCall(t, srv, elbAPI, form, signed)
}

// decodeELB makes an ELB call that must succeed and decodes its answer.
func decodeELB[T any](t *testing.T, srv *httptest.Server, form url.Values) T {
	t.Helper()
	var out T
	code, body := elbCall(t, srv, form, true)
	if code != http.StatusOK {
		t.Fatalf("%s: status %d: %s", form.Get("Action"), code, body)
	}
	if err := xml.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("%s: %v\n%s", form.Get("Action"), err, body)
	}
	return out
}

type elbErrorXML struct {
	XMLName   xml.Name `xml:"http://elasticloadbalancing.amazonaws.com/doc/2012-06-01/ ErrorResponse"`
	Type      string   `xml:"Error>Type"`
	Code      string   `xml:"Error>Code"`
	Message   string   `xml:"Error>Message"`
	RequestID string   `xml:"RequestId"`
}

// expectELBError makes an ELB call that must fail with status and code.
func expectELBError(t *testing.T, srv *httptest.Server, form url.Values, status int, code string) {
	t.Helper()
	got, body := elbCall(t, srv, form, true)
	var e elbErrorXML
	if err := xml.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	if got != status || e.Code != code || e.Message == "" || e.RequestID == "" {
		t.Errorf("%s: got %d %s %q, want %d %s", form.Get("Action"), got, e.Code, e.Message, status, code)
	}
}

// elbForm is a call of action on the load balancer name, with more
// parameters as key, value pairs.
func elbForm(action, name string, kv ...string) url.Values {
	form := url.Values{"Action": {action}}
	if name != "" {
		form.Set("LoadBalancerName", name)
	}
	for i := 0; i < len(kv); i += 2 {
		form.Add(kv[i], kv[i+1])
	}
	return form
}

// createELB is a CreateLoadBalancer of name with a TCP listener from port
// 80 to 30080, in the subnets of the first two zones.
func createELB(c *AWS, name string, kv ...string) url.Values {
	return elbForm("CreateLoadBalancer", name, append([]string{
		"Listeners.member.1.Protocol", "tcp", "Listeners.member.1.LoadBalancerPort", "80",
		"Listeners.member.1.InstanceProtocol", "tcp", "Listeners.member.1.InstancePort", "30080",
		"Subnets.member.1", c.subnetID(0), "Subnets.member.2", c.subnetID(1),
	}, kv...)...)
}

type describeELBsXML struct {
	LBs []struct {
		Name      string   `xml:"LoadBalancerName"`
		DNSName   string   `xml:"DNSName"`
		Scheme    string   `xml:"Scheme"`
		VPC       string   `xml:"VPCId"`
		Subnets   []string `xml:"Subnets>member"`
		Zones     []string `xml:"AvailabilityZones>member"`
		Groups    []string `xml:"SecurityGroups>member"`
		Instances []string `xml:"Instances>member>InstanceId"`
		Listeners []struct {
			Protocol         string `xml:"Protocol"`
			LoadBalancerPort int32  `xml:"LoadBalancerPort"`
			InstanceProtocol string `xml:"InstanceProtocol"`
			InstancePort     int32  `xml:"InstancePort"`
		} `xml:"ListenerDescriptions>member>Listener"`
		HealthCheck struct {
			Target   string `xml:"Target"`
			Interval int32  `xml:"Interval"`
		} `xml:"HealthCheck"`
		SourceGroup string `xml:"SourceSecurityGroup>GroupName"`
		CreatedTime string `xml:"CreatedTime"`
	} `xml:"DescribeLoadBalancersResult>LoadBalancerDescriptions>member"`
	NextMarker string `xml:"DescribeLoadBalancersResult>NextMarker"`
	RequestID  string `xml:"ResponseMetadata>RequestId"`
}

func describeELB(t *testing.T, srv *httptest.Server, name string) describeELBsXML {
	t.Helper()
	return decodeELB[describeELBsXML](t, srv, elbForm("DescribeLoadBalancers", "", "LoadBalancerNames.member.1", name))
}

// TestELBCreateAndDescribe: a new load balancer as ELB describes it, with
// ELB's defaults: internet-facing, in the VPC's default security group, a
// TCP health check on the first listener's instance port.
func TestELBCreateAndDescribe(t *testing.T) {
	c, srv := ec2Cloud(t)
	type createXML struct {
		DNSName string `xml:"CreateLoadBalancerResult>DNSName"`
	}
	created := decodeELB[createXML](t, srv, createELB(c, "a1", "Tags.member.1.Key", "kubernetes.io/cluster/demo", "Tags.member.1.Value", "owned"))
	if !regexp.MustCompile(`^a1-\d{10}\.us-east-1\.elb\.amazonaws\.com$`).MatchString(created.DNSName) {
		t.Errorf("DNS name %q", created.DNSName)
	}
	got := describeELB(t, srv, "a1")
	if len(got.LBs) != 1 || got.RequestID == "" {
		t.Fatalf("described %+v", got)
	}
	lb := got.LBs[0]
	if lb.Name != "a1" || lb.DNSName != created.DNSName || lb.Scheme != "internet-facing" || lb.VPC != c.vpcID() || lb.CreatedTime == "" {
		t.Errorf("load balancer %+v", lb)
	}
	if !slices.Equal(lb.Subnets, []string{c.subnetID(0), c.subnetID(1)}) || !slices.Equal(lb.Zones, []string{"us-east-1a", "us-east-1b"}) {
		t.Errorf("subnets %v in zones %v", lb.Subnets, lb.Zones)
	}
	if !slices.Equal(lb.Groups, []string{c.defaultSecurityGroupID()}) || lb.SourceGroup != "default" {
		t.Errorf("security groups %v (source %q), want the VPC's default one", lb.Groups, lb.SourceGroup)
	}
	if len(lb.Listeners) != 1 || lb.Listeners[0].Protocol != "TCP" || lb.Listeners[0].LoadBalancerPort != 80 || lb.Listeners[0].InstancePort != 30080 {
		t.Errorf("listeners %+v", lb.Listeners)
	}
	if lb.HealthCheck.Target != "TCP:30080" || lb.HealthCheck.Interval != 30 || len(lb.Instances) != 0 {
		t.Errorf("health check %+v, instances %v", lb.HealthCheck, lb.Instances)
	}
	if e := c.ELBs(); len(e) != 1 || !maps.Equal(e[0].Tags, map[string]string{"kubernetes.io/cluster/demo": "owned"}) {
		t.Errorf("ELBs() %+v", e)
	}
	// Asked again with the same listeners, ELB answers the same name.
	if again := decodeELB[createXML](t, srv, createELB(c, "a1")); again.DNSName != created.DNSName {
		t.Errorf("created again: %q, want %q", again.DNSName, created.DNSName)
	}
	internal := decodeELB[createXML](t, srv, elbForm("CreateLoadBalancer", "in1", "Scheme", "internal",
		"Listeners.member.1.Protocol", "HTTP", "Listeners.member.1.LoadBalancerPort", "80", "Listeners.member.1.InstancePort", "30081",
		"AvailabilityZones.member.1", "us-east-1c"))
	if !strings.HasPrefix(internal.DNSName, "internal-in1-") {
		t.Errorf("internal load balancer's DNS name %q", internal.DNSName)
	}
	if lb := describeELB(t, srv, "in1").LBs[0]; !slices.Equal(lb.Subnets, []string{c.subnetID(2)}) || lb.Listeners[0].InstanceProtocol != "HTTP" {
		t.Errorf("load balancer made by zone: %+v", lb)
	}
	if n := c.cloud.Calls().ByOp["ELB:CreateLoadBalancer"]; n != 3 {
		t.Errorf("counted %d CreateLoadBalancer calls, want 3", n)
	}
}

func TestELBCreateErrors(t *testing.T) {
	c, srv := ec2Cloud(t)
	decodeELB[struct{}](t, srv, createELB(c, "taken"))
	for _, tc := range []struct {
		name string
		form url.Values
		code string
	}{
		{"name with a dot", createELB(c, "a.b"), "ValidationError"},
		{"name too long", createELB(c, strings.Repeat("a", 33)), "ValidationError"},
		{"no listeners", elbForm("CreateLoadBalancer", "x", "Subnets.member.1", c.subnetID(0)), "ValidationError"},
		{"unknown protocol", createELB(c, "x", "Listeners.member.2.Protocol", "QUIC", "Listeners.member.2.LoadBalancerPort", "81", "Listeners.member.2.InstancePort", "30081"), "UnsupportedProtocol"},
		{"HTTP to TCP", createELB(c, "x", "Listeners.member.2.Protocol", "HTTP", "Listeners.member.2.LoadBalancerPort", "81", "Listeners.member.2.InstanceProtocol", "TCP", "Listeners.member.2.InstancePort", "30081"), "InvalidConfigurationRequest"},
		{"HTTPS without a certificate", createELB(c, "x", "Listeners.member.2.Protocol", "HTTPS", "Listeners.member.2.LoadBalancerPort", "443", "Listeners.member.2.InstancePort", "30081"), "InvalidConfigurationRequest"},
		{"port 0", createELB(c, "x", "Listeners.member.2.Protocol", "TCP", "Listeners.member.2.LoadBalancerPort", "0", "Listeners.member.2.InstancePort", "30081"), "ValidationError"},
		{"two listeners on a port", createELB(c, "x", "Listeners.member.2.Protocol", "TCP", "Listeners.member.2.LoadBalancerPort", "80", "Listeners.member.2.InstancePort", "30081"), "DuplicateListener"},
		{"no subnets", elbForm("CreateLoadBalancer", "x", "Listeners.member.1.Protocol", "TCP", "Listeners.member.1.LoadBalancerPort", "80", "Listeners.member.1.InstancePort", "30080"), "ValidationError"},
		{"subnets and zones", createELB(c, "x", "AvailabilityZones.member.1", "us-east-1a"), "ValidationError"},
		{"unknown subnet", createELB(c, "x", "Subnets.member.3", "subnet-0123456789abcdef0"), "SubnetNotFound"},
		{"unknown security group", createELB(c, "x", "SecurityGroups.member.1", "sg-0123456789abcdef0"), "InvalidSecurityGroup"},
		{"unknown scheme", createELB(c, "x", "Scheme", "public"), "InvalidScheme"},
		{"a tag key twice", createELB(c, "x", "Tags.member.1.Key", "k", "Tags.member.2.Key", "k"), "DuplicateTagKeys"},
		{"a name taken with other listeners", elbForm("CreateLoadBalancer", "taken", "Listeners.member.1.Protocol", "TCP",
			"Listeners.member.1.LoadBalancerPort", "81", "Listeners.member.1.InstancePort", "30080", "Subnets.member.1", c.subnetID(0)), "DuplicateLoadBalancerName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expectELBError(t, srv, tc.form, http.StatusBadRequest, tc.code)
		})
	}
	if got := len(c.ELBs()); got != 1 {
		t.Errorf("%d load balancers after the failed calls, want 1", got)
	}
}

// TestELBInstances: registered instances are behind the load balancer
// until deregistered or terminated, as ELB deregisters a terminated one.
func TestELBInstances(t *testing.T) {
	c, srv := ec2Cloud(t)
	decodeELB[struct{}](t, srv, createELB(c, "a1"))
	type instancesXML struct {
		IDs []string `xml:"RegisterInstancesWithLoadBalancerResult>Instances>member>InstanceId"`
	}
	got := decodeELB[instancesXML](t, srv, elbForm("RegisterInstancesWithLoadBalancer", "a1",
		"Instances.member.1.InstanceId", "i-00000001", "Instances.member.2.InstanceId", "i-00000002", "Instances.member.3.InstanceId", "i-00000003"))
	if !slices.Equal(got.IDs, []string{"i-00000001", "i-00000002", "i-00000003"}) {
		t.Errorf("registered %v", got.IDs)
	}
	if _, err := c.cloud.SetState("i-00000003", simcloud.StateTerminated); err != nil {
		t.Fatal(err)
	}
	if lb := describeELB(t, srv, "a1").LBs[0]; !slices.Equal(lb.Instances, []string{"i-00000001", "i-00000002"}) {
		t.Errorf("after a termination: %v", lb.Instances)
	}
	decodeELB[struct{}](t, srv, elbForm("DeregisterInstancesFromLoadBalancer", "a1", "Instances.member.1.InstanceId", "i-00000001"))
	if e := c.ELBs(); !slices.Equal(e[0].Instances, []string{"i-00000002"}) {
		t.Errorf("after deregistering: %v", e[0].Instances)
	}
	expectELBError(t, srv, elbForm("RegisterInstancesWithLoadBalancer", "a1", "Instances.member.1.InstanceId", "i-0000ffff"), http.StatusBadRequest, "InvalidInstance")
	expectELBError(t, srv, elbForm("RegisterInstancesWithLoadBalancer", "a1", "Instances.member.1.InstanceId", "i-00000003"), http.StatusBadRequest, "InvalidInstance")
	expectELBError(t, srv, elbForm("RegisterInstancesWithLoadBalancer", "nope", "Instances.member.1.InstanceId", "i-00000001"), http.StatusBadRequest, "LoadBalancerNotFound")
}

func TestELBConfigureHealthCheck(t *testing.T) {
	c, srv := ec2Cloud(t)
	decodeELB[struct{}](t, srv, createELB(c, "a1"))
	check := func(target, interval, timeout, healthy, unhealthy string) url.Values {
		return elbForm("ConfigureHealthCheck", "a1", "HealthCheck.Target", target, "HealthCheck.Interval", interval,
			"HealthCheck.Timeout", timeout, "HealthCheck.HealthyThreshold", healthy, "HealthCheck.UnhealthyThreshold", unhealthy)
	}
	for _, tc := range []struct {
		name string
		form url.Values
		code string // "": accepted
	}{
		{"TCP", check("TCP:30080", "10", "5", "2", "6"), ""},
		{"HTTP with a path", check("HTTP:10256/healthz", "10", "5", "2", "6"), ""},
		{"HTTP without a path", check("HTTP:10256", "10", "5", "2", "6"), "ValidationError"},
		{"TCP with a path", check("TCP:30080/", "10", "5", "2", "6"), "ValidationError"},
		{"port out of range", check("TCP:70000", "10", "5", "2", "6"), "ValidationError"},
		{"interval too short", check("TCP:30080", "4", "2", "2", "6"), "ValidationError"},
		{"timeout not below the interval", check("TCP:30080", "10", "10", "2", "6"), "ValidationError"},
		{"threshold too low", check("TCP:30080", "10", "5", "1", "6"), "ValidationError"},
		{"a field missing", elbForm("ConfigureHealthCheck", "a1", "HealthCheck.Target", "TCP:30080"), "ValidationError"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.code != "" {
				expectELBError(t, srv, tc.form, http.StatusBadRequest, tc.code)
				return
			}
			decodeELB[struct{}](t, srv, tc.form)
			if got := c.ELBs()[0].HealthCheck; got.Target != tc.form.Get("HealthCheck.Target") || got.Interval != 10 || got.UnhealthyThreshold != 6 {
				t.Errorf("health check %+v", got)
			}
		})
	}
}

// TestELBAttributes: ELB's defaults, changed one by one.
func TestELBAttributes(t *testing.T) {
	c, srv := ec2Cloud(t)
	decodeELB[struct{}](t, srv, createELB(c, "a1"))
	type attributesXML struct {
		AccessLog         bool       `xml:"DescribeLoadBalancerAttributesResult>LoadBalancerAttributes>AccessLog>Enabled"`
		Draining          bool       `xml:"DescribeLoadBalancerAttributesResult>LoadBalancerAttributes>ConnectionDraining>Enabled"`
		DrainingTimeout   int32      `xml:"DescribeLoadBalancerAttributesResult>LoadBalancerAttributes>ConnectionDraining>Timeout"`
		IdleTimeout       int32      `xml:"DescribeLoadBalancerAttributesResult>LoadBalancerAttributes>ConnectionSettings>IdleTimeout"`
		CrossZone         bool       `xml:"DescribeLoadBalancerAttributesResult>LoadBalancerAttributes>CrossZoneLoadBalancing>Enabled"`
		AdditionalPresent []struct{} `xml:"DescribeLoadBalancerAttributesResult>LoadBalancerAttributes>AdditionalAttributes"`
	}
	got := decodeELB[attributesXML](t, srv, elbForm("DescribeLoadBalancerAttributes", "a1"))
	if got.AccessLog || got.Draining || got.DrainingTimeout != 300 || got.IdleTimeout != 60 || got.CrossZone || len(got.AdditionalPresent) != 0 {
		t.Errorf("defaults %+v", got)
	}
	decodeELB[struct{}](t, srv, elbForm("ModifyLoadBalancerAttributes", "a1",
		"LoadBalancerAttributes.ConnectionSettings.IdleTimeout", "120", "LoadBalancerAttributes.CrossZoneLoadBalancing.Enabled", "true"))
	got = decodeELB[attributesXML](t, srv, elbForm("DescribeLoadBalancerAttributes", "a1"))
	if got.IdleTimeout != 120 || !got.CrossZone || got.DrainingTimeout != 300 {
		t.Errorf("after modifying: %+v", got)
	}
	for _, tc := range []struct {
		name string
		kv   []string
		code string
	}{
		{"idle timeout out of range", []string{"LoadBalancerAttributes.ConnectionSettings.IdleTimeout", "0"}, "ValidationError"},
		{"not a boolean", []string{"LoadBalancerAttributes.CrossZoneLoadBalancing.Enabled", "yes"}, "ValidationError"},
		{"access log without a bucket", []string{"LoadBalancerAttributes.AccessLog.Enabled", "true"}, "InvalidConfigurationRequest"},
		{"additional attributes", []string{"LoadBalancerAttributes.AdditionalAttributes.member.1.Key", "elb.http.desyncmitigationmode"}, "LoadBalancerAttributeNotFound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expectELBError(t, srv, elbForm("ModifyLoadBalancerAttributes", "a1", tc.kv...), http.StatusBadRequest, tc.code)
		})
	}
}

// TestELBReconfigure: the changes UpdateLoadBalancer and EnsureLoadBalancer
// make to an existing load balancer: listeners, security groups, subnets.
func TestELBReconfigure(t *testing.T) {
	c, srv := ec2Cloud(t)
	decodeELB[struct{}](t, srv, createELB(c, "a1"))
	type groupXML struct {
		ID string `xml:"groupId"`
	}
	sg := decodeEC2[groupXML](t, srv, url.Values{"Action": {"CreateSecurityGroup"}, "GroupName": {"k8s-elb-a1"}, "GroupDescription": {"d"}}).ID
	for _, step := range []struct {
		name string
		form url.Values
		code string // "": succeeds
	}{
		{"add an SSL listener", elbForm("CreateLoadBalancerListeners", "a1", "Listeners.member.1.Protocol", "SSL", "Listeners.member.1.LoadBalancerPort", "443",
			"Listeners.member.1.InstanceProtocol", "TCP", "Listeners.member.1.InstancePort", "30443", "Listeners.member.1.SSLCertificateId", "arn:aws:acm:us-east-1:000000000000:certificate/x"), ""},
		{"another listener on port 80", elbForm("CreateLoadBalancerListeners", "a1", "Listeners.member.1.Protocol", "TCP", "Listeners.member.1.LoadBalancerPort", "80",
			"Listeners.member.1.InstancePort", "30081"), "DuplicateListener"},
		{"remove the listener on port 80", elbForm("DeleteLoadBalancerListeners", "a1", "LoadBalancerPorts.member.1", "80"), ""},
		{"its own security group", elbForm("ApplySecurityGroupsToLoadBalancer", "a1", "SecurityGroups.member.1", sg), ""},
		{"an unknown security group", elbForm("ApplySecurityGroupsToLoadBalancer", "a1", "SecurityGroups.member.1", "sg-0123456789abcdef0"), "InvalidSecurityGroup"},
		{"the third zone's subnet", elbForm("AttachLoadBalancerToSubnets", "a1", "Subnets.member.1", c.subnetID(2)), ""},
		{"leave the first two zones", elbForm("DetachLoadBalancerFromSubnets", "a1", "Subnets.member.1", c.subnetID(0), "Subnets.member.2", c.subnetID(1)), ""},
		{"leave every zone", elbForm("DetachLoadBalancerFromSubnets", "a1", "Subnets.member.1", c.subnetID(2)), "InvalidConfigurationRequest"},
	} {
		if step.code != "" {
			expectELBError(t, srv, step.form, http.StatusBadRequest, step.code)
		} else {
			decodeELB[struct{}](t, srv, step.form)
		}
		if t.Failed() {
			t.Fatalf("step %q failed", step.name)
		}
	}
	lb := c.ELBs()[0]
	want := []ELBListener{{Protocol: "SSL", LoadBalancerPort: 443, InstanceProtocol: "TCP", InstancePort: 30443, SSLCertificateID: "arn:aws:acm:us-east-1:000000000000:certificate/x"}}
	if !slices.Equal(lb.Listeners, want) || !slices.Equal(lb.SecurityGroups, []string{sg}) || !slices.Equal(lb.Subnets, []string{c.subnetID(2)}) {
		t.Errorf("load balancer %+v", lb)
	}
	// The group is the load balancer's: it cannot go before it does.
	expectEC2Error(t, srv, url.Values{"Action": {"DeleteSecurityGroup"}, "GroupId": {sg}}, "DependencyViolation")
	decodeELB[struct{}](t, srv, elbForm("DeleteLoadBalancer", "a1"))
	decodeELB[struct{}](t, srv, elbForm("DeleteLoadBalancer", "a1")) // already gone: no error
	expectELBError(t, srv, elbForm("DescribeLoadBalancers", "", "LoadBalancerNames.member.1", "a1"), http.StatusBadRequest, "LoadBalancerNotFound")
	decodeEC2[struct{}](t, srv, url.Values{"Action": {"DeleteSecurityGroup"}, "GroupId": {sg}})
}

func TestELBDescribePages(t *testing.T) {
	c, srv := ec2Cloud(t)
	for _, name := range []string{"c", "a", "b"} {
		decodeELB[struct{}](t, srv, createELB(c, name))
	}
	var names []string
	marker := ""
	for range 3 {
		form := elbForm("DescribeLoadBalancers", "", "PageSize", "2")
		if marker != "" {
			form.Set("Marker", marker)
		}
		page := decodeELB[describeELBsXML](t, srv, form)
		for _, lb := range page.LBs {
			names = append(names, lb.Name)
		}
		if marker = page.NextMarker; marker == "" {
			break
		}
	}
	if !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Errorf("pages gave %v, want a, b, c once each", names)
	}
}

func TestELBErrors(t *testing.T) {
	c, srv := ec2Cloud(t)
	tooManyNames := elbForm("DescribeLoadBalancers", "")
	for i := range 21 {
		tooManyNames.Set("LoadBalancerNames.member."+strconv.Itoa(i+1), "lb"+strconv.Itoa(i))
	}
	for _, tc := range []struct {
		name     string
		form     url.Values
		unsigned bool
		status   int
		code     string
	}{
		{"unknown action", url.Values{"Action": {"LaunchRockets"}}, false, 400, "InvalidAction"},
		{"action the sim does not implement", url.Values{"Action": {"AddTags"}}, false, 400, "UnsupportedOperation"},
		{"unsigned", url.Values{"Action": {"DescribeLoadBalancers"}}, true, 401, "AuthFailure"},
		{"unknown load balancer", elbForm("DescribeLoadBalancerAttributes", "nope"), false, 400, "LoadBalancerNotFound"},
		{"too many names", tooManyNames, false, 400, "ValidationError"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := elbCall(t, srv, tc.form, !tc.unsigned)
			var e elbErrorXML
			if err := xml.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("%v\n%s", err, body)
			}
			if status != tc.status || e.Code != tc.code || e.Type != "Sender" {
				t.Errorf("got %d %s (%s), want %d %s\n%s", status, e.Code, e.Type, tc.status, tc.code, body)
			}
		})
	}
	// The cloud's fault knobs, in ELB's words.
	c.cloud.ResetCalls()
	c.cloud.SetSettings(simcloud.Settings{ErrorRate: 1})
	expectELBError(t, srv, url.Values{"Action": {"DescribeLoadBalancers"}}, http.StatusInternalServerError, "InternalFailure")
	c.cloud.SetSettings(simcloud.Settings{RateLimit: 0.001, RateBurst: 1})
	elbCall(t, srv, url.Values{"Action": {"DescribeLoadBalancers"}}, true)
	expectELBError(t, srv, url.Values{"Action": {"DescribeLoadBalancers"}}, http.StatusBadRequest, "Throttling")
	if n := c.cloud.Calls().ByOp["ELB:DescribeLoadBalancers"]; n != 3 {
		t.Errorf("counted %d DescribeLoadBalancers calls, want 3", n)
	}
}
