package awsemu

import (
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
)

type securityGroupsXML struct {
	Groups []struct {
		ID      string `xml:"groupId"`
		Name    string `xml:"groupName"`
		VPC     string `xml:"vpcId"`
		Ingress []struct {
			Protocol string   `xml:"ipProtocol"`
			FromPort *int32   `xml:"fromPort"`
			ToPort   *int32   `xml:"toPort"`
			CIDRs    []string `xml:"ipRanges>item>cidrIp"`
			Groups   []string `xml:"groups>item>groupId"`
		} `xml:"ipPermissions>item"`
		Tags []struct {
			Key   string `xml:"key"`
			Value string `xml:"value"`
		} `xml:"tagSet>item"`
	} `xml:"securityGroupInfo>item"`
}

func (x securityGroupsXML) names() []string {
	var out []string
	for _, g := range x.Groups {
		out = append(out, g.Name)
	}
	slices.Sort(out)
	return out
}

// TestEC2InstancesInDefaultSecurityGroup: every instance is in its VPC's
// default group, which admits its own members.
func TestEC2InstancesInDefaultSecurityGroup(t *testing.T) {
	c, srv := ec2Cloud(t)
	type groupsXML struct {
		Groups []string `xml:"reservationSet>item>instancesSet>item>groupSet>item>groupId"`
	}
	got := decodeEC2[groupsXML](t, srv, url.Values{"Action": {"DescribeInstances"}, "InstanceId.1": {"i-00000001"}})
	def := c.defaultSecurityGroupID()
	if !slices.Equal(got.Groups, []string{def}) {
		t.Errorf("instance's groups %v, want [%s]", got.Groups, def)
	}
	groups := decodeEC2[securityGroupsXML](t, srv, url.Values{"Action": {"DescribeSecurityGroups"}, "GroupId.1": {def}})
	if len(groups.Groups) != 1 || groups.Groups[0].Name != "default" || groups.Groups[0].VPC != c.vpcID() ||
		len(groups.Groups[0].Ingress) != 1 || !slices.Equal(groups.Groups[0].Ingress[0].Groups, []string{def}) {
		t.Errorf("default group %+v: want the VPC's, admitting itself", groups.Groups)
	}
}

// TestEC2SecurityGroupLifecycle walks a group through what a load balancer
// does with one: made with tags, rules authorized on it and, naming it, on
// the instances' group, found by those rules, deleted once nothing uses it.
func TestEC2SecurityGroupLifecycle(t *testing.T) {
	c, srv := ec2Cloud(t)
	def := c.defaultSecurityGroupID()
	type createXML struct {
		ID string `xml:"groupId"`
	}
	lb := decodeEC2[createXML](t, srv, url.Values{
		"Action": {"CreateSecurityGroup"}, "GroupName": {"k8s-elb-a1"}, "GroupDescription": {"for a1"}, "VpcId": {c.vpcID()},
		"TagSpecification.1.ResourceType": {"security-group"},
		"TagSpecification.1.Tag.1.Key":    {"kubernetes.io/cluster/demo"}, "TagSpecification.1.Tag.1.Value": {"owned"},
	}).ID
	if !securityGroupIDPattern.MatchString(lb) {
		t.Fatalf("new group's ID %q", lb)
	}
	open80 := url.Values{"GroupId": {lb},
		"IpPermissions.1.IpProtocol": {"tcp"}, "IpPermissions.1.FromPort": {"80"}, "IpPermissions.1.ToPort": {"80"},
		"IpPermissions.1.IpRanges.1.CidrIp": {"0.0.0.0/0"},
		"IpPermissions.2.IpProtocol":        {"icmp"}, "IpPermissions.2.FromPort": {"3"}, "IpPermissions.2.ToPort": {"4"},
		"IpPermissions.2.IpRanges.1.CidrIp": {"0.0.0.0/0"}}
	fromLB := url.Values{"GroupId": {def}, "IpPermissions.1.IpProtocol": {"-1"}, "IpPermissions.1.Groups.1.GroupId": {lb}}
	for _, step := range []struct {
		name   string
		action string
		form   url.Values
		code   string // "": succeeds
	}{
		{"same name again", "CreateSecurityGroup", url.Values{"GroupName": {"k8s-elb-a1"}, "GroupDescription": {"again"}}, "InvalidGroup.Duplicate"},
		{"open port 80", "AuthorizeSecurityGroupIngress", open80, ""},
		{"the same rules again", "AuthorizeSecurityGroupIngress", open80, "InvalidPermission.Duplicate"},
		{"admit the group on the instances' group", "AuthorizeSecurityGroupIngress", fromLB, ""},
		{"deleted while a rule names it", "DeleteSecurityGroup", url.Values{"GroupId": {lb}}, "DependencyViolation"},
		{"revoke the rule naming it", "RevokeSecurityGroupIngress", fromLB, ""},
		{"revoking it again is no error", "RevokeSecurityGroupIngress", fromLB, ""},
		{"the default group", "DeleteSecurityGroup", url.Values{"GroupId": {def}}, "CannotDelete"},
		{"delete", "DeleteSecurityGroup", url.Values{"GroupId": {lb}}, ""},
		{"deleted", "DescribeSecurityGroups", url.Values{"GroupId.1": {lb}}, "InvalidGroup.NotFound"},
	} {
		form := url.Values{}
		for k, v := range step.form {
			form[k] = v
		}
		form.Set("Action", step.action)
		if step.code != "" {
			expectEC2Error(t, srv, form, step.code)
		} else {
			decodeEC2[struct{}](t, srv, form)
		}
		if t.Failed() {
			t.Fatalf("step %q failed", step.name)
		}
		if step.name == "admit the group on the instances' group" {
			checkSecurityGroupRules(t, srv, def, lb)
		}
	}
	if got := len(c.SecurityGroups()); got != 1 {
		t.Errorf("%d groups left, want the default one", got)
	}
}

// checkSecurityGroupRules checks, while the load balancer's group lb is
// open on port 80 and admitted by the default group def, how
// DescribeSecurityGroups shows and finds them.
func checkSecurityGroupRules(t *testing.T, srv *httptest.Server, def, lb string) {
	t.Helper()
	got := decodeEC2[securityGroupsXML](t, srv, url.Values{"Action": {"DescribeSecurityGroups"}, "GroupId.1": {lb}})
	g := got.Groups[0]
	if len(g.Ingress) != 2 || g.Ingress[0].Protocol != "tcp" || *g.Ingress[0].FromPort != 80 || *g.Ingress[0].ToPort != 80 ||
		!slices.Equal(g.Ingress[0].CIDRs, []string{"0.0.0.0/0"}) || g.Ingress[1].Protocol != "icmp" || *g.Ingress[1].FromPort != 3 {
		t.Errorf("load balancer's group's rules %+v", g.Ingress)
	}
	if len(g.Tags) != 1 || g.Tags[0].Key != "kubernetes.io/cluster/demo" || g.Tags[0].Value != "owned" {
		t.Errorf("load balancer's group's tags %+v", g.Tags)
	}
	for _, tc := range []struct {
		filter, value string
		want          []string // names
	}{
		{"ip-permission.group-id", lb, []string{"default"}},
		{"tag:kubernetes.io/cluster/demo", "owned", []string{"k8s-elb-a1"}},
		{"group-name", "k8s-elb-*", []string{"k8s-elb-a1"}},
		{"ip-permission.from-port", "80", []string{"k8s-elb-a1"}},
		{"vpc-id", "vpc-0123456789abcdef0", nil},
	} {
		got := decodeEC2[securityGroupsXML](t, srv, url.Values{"Action": {"DescribeSecurityGroups"}, "Filter.1.Name": {tc.filter}, "Filter.1.Value.1": {tc.value}})
		if !slices.Equal(got.names(), tc.want) {
			t.Errorf("%s=%s: %v, want %v", tc.filter, tc.value, got.names(), tc.want)
		}
	}
	// As EC2 does, the default group's rules for all protocols are one
	// permission with both sources, and without ports.
	got = decodeEC2[securityGroupsXML](t, srv, url.Values{"Action": {"DescribeSecurityGroups"}, "GroupId.1": {def}})
	p := got.Groups[0].Ingress
	if len(p) != 1 || p[0].Protocol != "-1" || p[0].FromPort != nil || !slices.Equal(p[0].Groups, []string{def, lb}) {
		t.Errorf("default group's rules %+v, want one for all protocols from itself and %s", p, lb)
	}
}

func TestEC2SecurityGroupErrors(t *testing.T) {
	c, srv := ec2Cloud(t)
	def := c.defaultSecurityGroupID()
	rule := func(kv ...string) url.Values {
		form := url.Values{"Action": {"AuthorizeSecurityGroupIngress"}, "GroupId": {def}}
		for i := 0; i < len(kv); i += 2 {
			form.Set("IpPermissions.1."+kv[i], kv[i+1])
		}
		return form
	}
	for _, tc := range []struct {
		name string
		form url.Values
		code string
	}{
		{"no name", url.Values{"Action": {"CreateSecurityGroup"}, "GroupDescription": {"d"}}, "MissingParameter"},
		{"no description", url.Values{"Action": {"CreateSecurityGroup"}, "GroupName": {"g"}}, "MissingParameter"},
		{"named default", url.Values{"Action": {"CreateSecurityGroup"}, "GroupName": {"default"}, "GroupDescription": {"d"}}, "InvalidGroup.Reserved"},
		{"other VPC", url.Values{"Action": {"CreateSecurityGroup"}, "GroupName": {"g"}, "GroupDescription": {"d"}, "VpcId": {"vpc-0123456789abcdef0"}}, "InvalidVpcID.NotFound"},
		{"tags for another kind", url.Values{"Action": {"CreateSecurityGroup"}, "GroupName": {"g"}, "GroupDescription": {"d"},
			"TagSpecification.1.ResourceType": {"instance"}, "TagSpecification.1.Tag.1.Key": {"k"}}, "InvalidParameterValue"},
		{"unknown group", url.Values{"Action": {"DescribeSecurityGroups"}, "GroupId.1": {"sg-0123456789abcdef0"}}, "InvalidGroup.NotFound"},
		{"malformed group ID", url.Values{"Action": {"DeleteSecurityGroup"}, "GroupId": {"web"}}, "InvalidGroupId.Malformed"},
		{"no permissions", url.Values{"Action": {"AuthorizeSecurityGroupIngress"}, "GroupId": {def}}, "MissingParameter"},
		{"no source", rule("IpProtocol", "tcp", "FromPort", "80", "ToPort", "80"), "InvalidParameterValue"},
		{"TCP without ports", rule("IpProtocol", "tcp", "IpRanges.1.CidrIp", "0.0.0.0/0"), "InvalidParameterValue"},
		{"ports reversed", rule("IpProtocol", "udp", "FromPort", "90", "ToPort", "80", "IpRanges.1.CidrIp", "0.0.0.0/0"), "InvalidParameterValue"},
		{"unknown protocol", rule("IpProtocol", "carrier-pigeon", "IpRanges.1.CidrIp", "0.0.0.0/0"), "InvalidParameterValue"},
		{"malformed CIDR", rule("IpProtocol", "-1", "IpRanges.1.CidrIp", "198.18.0.0/33"), "InvalidParameterValue"},
		{"unknown source group", rule("IpProtocol", "-1", "Groups.1.GroupId", "sg-0123456789abcdef0"), "InvalidGroup.NotFound"},
		{"IPv6 range", rule("IpProtocol", "-1", "Ipv6Ranges.1.CidrIpv6", "::/0"), "UnsupportedOperation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expectEC2Error(t, srv, tc.form, tc.code)
		})
	}
	if got := c.SecurityGroups(); len(got) != 1 || len(got[0].Ingress) != 1 {
		t.Errorf("groups after failed calls: %+v, want the default one as it was", got)
	}
}
