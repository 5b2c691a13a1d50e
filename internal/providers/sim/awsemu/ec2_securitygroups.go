package awsemu

import (
	"encoding/xml"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// SecurityGroup is a security group of the cloud's VPC, as the EC2 API
// makes and shows it. Only inbound rules are kept: every group allows all
// outbound traffic, as a new one does.
type SecurityGroup struct {
	ID          string
	Name        string
	Description string
	VpcID       string
	Tags        map[string]string
	// Ingress are its inbound rules, one per source, in the order they
	// were authorized.
	Ingress []SecurityGroupRule
}

// SecurityGroupRule allows Protocol ("tcp", "udp", "icmp", or "-1": all)
// on FromPort..ToPort (ICMP: type and code; unused for "-1") from CIDR or,
// when SourceGroupID is set instead, from the members of that group.
type SecurityGroupRule struct {
	Protocol         string
	FromPort, ToPort int32
	CIDR             string
	SourceGroupID    string
}

// SecurityGroups lists the VPC's security groups, its default one among
// them, sorted by ID.
func (aws *AWS) SecurityGroups() []SecurityGroup {
	aws.mu.Lock()
	defer aws.mu.Unlock()
	out := make([]SecurityGroup, 0, len(aws.secGroups))
	for _, id := range slices.Sorted(maps.Keys(aws.secGroups)) {
		out = append(out, aws.secGroups[id].clone())
	}
	return out
}

func (g *SecurityGroup) clone() SecurityGroup {
	out := *g
	out.Tags = maps.Clone(g.Tags)
	out.Ingress = slices.Clone(g.Ingress)
	return out
}

// defaultSecurityGroupID is the ID of the VPC's default group, which every
// instance is in.
func (aws *AWS) defaultSecurityGroupID() string { return "sg-" + shortHash(aws.region+"/sg/default") }

// addDefaultSecurityGroup makes the VPC's default group, which, as EC2's,
// lets its members reach each other.
func (aws *AWS) addDefaultSecurityGroup() {
	id := aws.defaultSecurityGroupID()
	aws.secGroups[id] = &SecurityGroup{
		ID: id, Name: "default", Description: "default VPC security group", VpcID: aws.vpcID(),
		Tags:    map[string]string{},
		Ingress: []SecurityGroupRule{{Protocol: "-1", SourceGroupID: id}},
	}
}

var securityGroupIDPattern = regexp.MustCompile(`^sg-([0-9a-f]{8}|[0-9a-f]{17})$`)

// securityGroup finds the group GroupId (or GroupName) names; the caller
// holds aws.mu.
func (aws *AWS) securityGroup(r *http.Request) (*SecurityGroup, error) {
	if id := r.Form.Get("GroupId"); id != "" {
		return aws.securityGroupByID(id)
	}
	if name := r.Form.Get("GroupName"); name != "" {
		for _, g := range aws.secGroups {
			if g.Name == name {
				return g, nil
			}
		}
		return nil, awsErrorf("InvalidGroup.NotFound", "The security group '%s' does not exist in default VPC '%s'", name, aws.vpcID())
	}
	return nil, awsErrorf("MissingParameter", "The request must contain the parameter groupId or groupName")
}

func (aws *AWS) securityGroupByID(id string) (*SecurityGroup, error) {
	if !securityGroupIDPattern.MatchString(id) {
		return nil, awsErrorf("InvalidGroupId.Malformed", "Invalid id: %q (expecting \"sg-...\")", id)
	}
	g, ok := aws.secGroups[id]
	if !ok {
		return nil, awsErrorf("InvalidGroup.NotFound", "The security group '%s' does not exist", id)
	}
	return g, nil
}

type describeSecurityGroupsResponse struct {
	XMLName xml.Name `xml:"DescribeSecurityGroupsResponse"`
	ec2Response
	Groups []ec2SecurityGroup `xml:"securityGroupInfo>item"`
}

type ec2SecurityGroup struct {
	OwnerID     string            `xml:"ownerId"`
	GroupID     string            `xml:"groupId"`
	GroupName   string            `xml:"groupName"`
	Description string            `xml:"groupDescription"`
	VpcID       string            `xml:"vpcId"`
	Arn         string            `xml:"securityGroupArn"`
	Ingress     []ec2IPPermission `xml:"ipPermissions>item"`
	Egress      []ec2IPPermission `xml:"ipPermissionsEgress>item"`
	Tags        []ec2Tag          `xml:"tagSet>item"`
	group       *SecurityGroup
}

type ec2IPPermission struct {
	IPProtocol string         `xml:"ipProtocol"`
	FromPort   *int32         `xml:"fromPort,omitempty"`
	ToPort     *int32         `xml:"toPort,omitempty"`
	Groups     []ec2GroupPair `xml:"groups>item"`
	IPRanges   []ec2IPRange   `xml:"ipRanges>item"`
}

type ec2GroupPair struct {
	UserID  string `xml:"userId"`
	GroupID string `xml:"groupId"`
}

type ec2IPRange struct {
	CidrIP string `xml:"cidrIp"`
}

// ec2Permissions groups rules as EC2 shows them: one permission per
// protocol and port range, with all its sources.
func ec2Permissions(rules []SecurityGroupRule) []ec2IPPermission {
	out := []ec2IPPermission{}
	index := map[[3]string]int{}
	for _, rule := range rules {
		key := [3]string{rule.Protocol, strconv.Itoa(int(rule.FromPort)), strconv.Itoa(int(rule.ToPort))}
		i, ok := index[key]
		if !ok {
			p := ec2IPPermission{IPProtocol: rule.Protocol}
			if rule.Protocol != "-1" {
				from, to := rule.FromPort, rule.ToPort
				p.FromPort, p.ToPort = &from, &to
			}
			i = len(out)
			index[key] = i
			out = append(out, p)
		}
		if rule.SourceGroupID != "" {
			out[i].Groups = append(out[i].Groups, ec2GroupPair{UserID: ec2OwnerID, GroupID: rule.SourceGroupID})
		} else {
			out[i].IPRanges = append(out[i].IPRanges, ec2IPRange{CidrIP: rule.CIDR})
		}
	}
	return out
}

func (aws *AWS) ec2SecurityGroupOf(g *SecurityGroup) ec2SecurityGroup {
	return ec2SecurityGroup{
		OwnerID: ec2OwnerID, GroupID: g.ID, GroupName: g.Name, Description: g.Description, VpcID: g.VpcID,
		Arn:     aws.arn("security-group", g.ID),
		Ingress: ec2Permissions(g.Ingress),
		Egress:  ec2Permissions([]SecurityGroupRule{{Protocol: "-1", CIDR: "0.0.0.0/0"}}),
		Tags:    ec2TagSet(g.Tags),
		group:   g,
	}
}

func (v ec2SecurityGroup) filter(name string) ([]string, bool) {
	g := v.group
	rules := func(attr func(SecurityGroupRule) string) []string {
		var out []string
		for _, rule := range g.Ingress {
			if s := attr(rule); s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	port := func(p int32, rule SecurityGroupRule) string {
		if rule.Protocol == "-1" {
			return ""
		}
		return strconv.Itoa(int(p))
	}
	switch name {
	case "group-id":
		return []string{g.ID}, true
	case "group-name":
		return []string{g.Name}, true
	case "description":
		return []string{g.Description}, true
	case "vpc-id":
		return []string{g.VpcID}, true
	case "owner-id":
		return []string{ec2OwnerID}, true
	case "ip-permission.group-id":
		return rules(func(rule SecurityGroupRule) string { return rule.SourceGroupID }), true
	case "ip-permission.cidr":
		return rules(func(rule SecurityGroupRule) string { return rule.CIDR }), true
	case "ip-permission.protocol":
		return rules(func(rule SecurityGroupRule) string { return rule.Protocol }), true
	case "ip-permission.from-port":
		return rules(func(rule SecurityGroupRule) string { return port(rule.FromPort, rule) }), true
	case "ip-permission.to-port":
		return rules(func(rule SecurityGroupRule) string { return port(rule.ToPort, rule) }), true
	}
	return tagFilter(g.Tags, name)
}

// ec2DescribeSecurityGroups lists the groups GroupId.N and GroupName.N name
// (all when none is named) that match the filters, in one page.
func (aws *AWS) ec2DescribeSecurityGroups(r *http.Request) (any, error) {
	filters, err := ec2Filters(r)
	if err != nil {
		return nil, err
	}
	ids, names := ec2List(r, "GroupId"), ec2List(r, "GroupName")
	aws.mu.Lock()
	defer aws.mu.Unlock()
	var groups []*SecurityGroup
	for _, id := range ids {
		g, err := aws.securityGroupByID(id)
		if err != nil {
			return nil, err
		}
		groups = append(groups, g)
	}
	for _, name := range names {
		found := false
		for _, g := range aws.secGroups {
			if g.Name == name {
				groups, found = append(groups, g), true
			}
		}
		if !found {
			return nil, awsErrorf("InvalidGroup.NotFound", "The security group '%s' does not exist in default VPC '%s'", name, aws.vpcID())
		}
	}
	if len(ids) == 0 && len(names) == 0 {
		for _, g := range aws.secGroups {
			groups = append(groups, g)
		}
	}
	slices.SortFunc(groups, func(a, b *SecurityGroup) int { return strings.Compare(a.ID, b.ID) })
	groups = slices.Compact(groups)
	resp := &describeSecurityGroupsResponse{Groups: []ec2SecurityGroup{}}
	for _, g := range groups {
		v := aws.ec2SecurityGroupOf(g)
		ok, err := matchFilters(filters, v.filter)
		if err != nil {
			return nil, err
		}
		if ok {
			resp.Groups = append(resp.Groups, v)
		}
	}
	return resp, nil
}

type createSecurityGroupResponse struct {
	XMLName xml.Name `xml:"CreateSecurityGroupResponse"`
	ec2Response
	Return  bool     `xml:"return"`
	GroupID string   `xml:"groupId"`
	Arn     string   `xml:"securityGroupArn"`
	Tags    []ec2Tag `xml:"tagSet>item"`
}

// ec2CreateSecurityGroup makes a group in the VPC, with the tags of its
// TagSpecification; a name is unique in the VPC.
func (aws *AWS) ec2CreateSecurityGroup(r *http.Request) (any, error) {
	name, desc := r.Form.Get("GroupName"), r.Form.Get("GroupDescription")
	switch {
	case name == "":
		return nil, awsErrorf("MissingParameter", "The request must contain the parameter groupName")
	case desc == "":
		return nil, awsErrorf("MissingParameter", "The request must contain the parameter groupDescription")
	case len(name) > 255 || len(desc) > 255:
		return nil, awsErrorf("InvalidParameterValue", "The group name and description must be at most 255 characters")
	case strings.HasPrefix(name, "sg-"):
		return nil, awsErrorf("InvalidParameterValue", "Group names may not be in the format sg-*")
	case name == "default":
		return nil, awsErrorf("InvalidGroup.Reserved", "The security group 'default' is reserved")
	}
	if vpc := r.Form.Get("VpcId"); vpc != "" && vpc != aws.vpcID() {
		return nil, awsErrorf("InvalidVpcID.NotFound", "The vpc ID '%s' does not exist", vpc)
	}
	tags, err := ec2TagSpecification(r, "security-group")
	if err != nil {
		return nil, err
	}
	aws.mu.Lock()
	defer aws.mu.Unlock()
	for _, g := range aws.secGroups {
		if g.Name == name {
			return nil, awsErrorf("InvalidGroup.Duplicate", "The security group '%s' already exists for VPC '%s'", name, aws.vpcID())
		}
	}
	aws.nextSG++
	g := &SecurityGroup{
		ID:   "sg-" + shortHash(fmt.Sprintf("%s/sg/%d", aws.region, aws.nextSG)),
		Name: name, Description: desc, VpcID: aws.vpcID(), Tags: tags, Ingress: []SecurityGroupRule{},
	}
	aws.secGroups[g.ID] = g
	return &createSecurityGroupResponse{Return: true, GroupID: g.ID, Arn: aws.arn("security-group", g.ID), Tags: ec2TagSet(tags)}, nil
}

// ec2TagSpecification reads the tags TagSpecification.N gives resources of
// kind (the only kind the action makes).
func ec2TagSpecification(r *http.Request, kind string) (map[string]string, error) {
	tags := map[string]string{}
	for i := 1; ; i++ {
		p := "TagSpecification." + strconv.Itoa(i)
		rt, ok := r.Form[p+".ResourceType"]
		if !ok {
			return tags, nil
		}
		if rt[0] != kind {
			return nil, awsErrorf("InvalidParameterValue", "'%s' is not a valid taggable resource type for this operation.", rt[0])
		}
		keys, values, err := ec2Tags(r, p+".Tag")
		if err != nil {
			return nil, err
		}
		for j, k := range keys {
			tags[k] = values[j]
		}
	}
}

type ec2ReturnResponse struct {
	XMLName xml.Name
	ec2Response
	Return  bool   `xml:"return"`
	GroupID string `xml:"groupId,omitempty"`
}

// ec2DeleteSecurityGroup deletes a group nothing uses: not the default
// one, not one a load balancer is in or another group's rule names.
func (aws *AWS) ec2DeleteSecurityGroup(r *http.Request) (any, error) {
	aws.mu.Lock()
	defer aws.mu.Unlock()
	g, err := aws.securityGroup(r)
	if err != nil {
		return nil, err
	}
	if g.ID == aws.defaultSecurityGroupID() {
		return nil, awsErrorf("CannotDelete", "the specified group: \"%s\" name: \"default\" cannot be deleted by a user", g.ID)
	}
	if user := aws.securityGroupUser(g.ID); user != "" {
		return nil, awsErrorf("DependencyViolation", "resource %s has a dependent object (%s)", g.ID, user)
	}
	delete(aws.secGroups, g.ID)
	return &ec2ReturnResponse{XMLName: xml.Name{Local: "DeleteSecurityGroupResponse"}, Return: true, GroupID: g.ID}, nil
}

// securityGroupUser names what keeps group id from being deleted: a load
// balancer in it, or another group with a rule naming it; "" if nothing.
// The caller holds aws.mu.
func (aws *AWS) securityGroupUser(id string) string {
	for _, lb := range aws.cloud.LoadBalancersWithData() {
		if d, ok := lb.Data.(classic); ok && slices.Contains(d.SecurityGroups, id) {
			return "load balancer " + lb.Name
		}
	}
	for _, gid := range slices.Sorted(maps.Keys(aws.secGroups)) {
		if gid == id {
			continue
		}
		for _, rule := range aws.secGroups[gid].Ingress {
			if rule.SourceGroupID == id {
				return "a rule of " + gid
			}
		}
	}
	return ""
}

// ec2IngressRules reads IpPermissions.N as rules, one per source: its
// IpRanges.M.CidrIp and Groups.M.GroupId. The caller holds aws.mu.
func (aws *AWS) ec2IngressRules(r *http.Request) ([]SecurityGroupRule, error) {
	var out []SecurityGroupRule
	for i := 1; ; i++ {
		p := "IpPermissions." + strconv.Itoa(i)
		proto, ok := r.Form[p+".IpProtocol"]
		if !ok {
			break
		}
		for _, list := range []string{"Ipv6Ranges", "PrefixListIds"} {
			if ec2HasList(r, p+"."+list) {
				return nil, awsErrorf("UnsupportedOperation", "The sim cloud does not implement %s in rules.", list)
			}
		}
		base, err := ec2RuleProtocolPorts(r, p, proto[0])
		if err != nil {
			return nil, err
		}
		sources, err := aws.ec2RuleSources(r, p)
		if err != nil {
			return nil, err
		}
		for _, src := range sources {
			rule := base
			rule.CIDR, rule.SourceGroupID = src.CIDR, src.SourceGroupID
			out = append(out, rule)
		}
	}
	if len(out) == 0 {
		return nil, awsErrorf("MissingParameter", "The request must contain the parameter ipPermissions")
	}
	return out, nil
}

// ec2HasList reports whether the request has any <prefix>.N... parameter.
func ec2HasList(r *http.Request, prefix string) bool {
	for k := range r.Form {
		if strings.HasPrefix(k, prefix+".") {
			return true
		}
	}
	return false
}

// ec2RuleSources reads permission p's sources: its CIDRs, canonical, and
// its groups, which must exist. The caller holds aws.mu.
func (aws *AWS) ec2RuleSources(r *http.Request, p string) ([]SecurityGroupRule, error) {
	var out []SecurityGroupRule
	for j := 1; ; j++ {
		cidr, ok := r.Form[p+".IpRanges."+strconv.Itoa(j)+".CidrIp"]
		if !ok {
			break
		}
		prefix, err := netip.ParsePrefix(cidr[0])
		if err != nil || !prefix.Addr().Is4() {
			return nil, awsErrorf("InvalidParameterValue", "CIDR block %s is malformed", cidr[0])
		}
		out = append(out, SecurityGroupRule{CIDR: prefix.Masked().String()})
	}
	for j := 1; ; j++ {
		gid, ok := r.Form[p+".Groups."+strconv.Itoa(j)+".GroupId"]
		if !ok {
			break
		}
		if _, err := aws.securityGroupByID(gid[0]); err != nil {
			return nil, err
		}
		out = append(out, SecurityGroupRule{SourceGroupID: gid[0]})
	}
	if len(out) == 0 {
		return nil, awsErrorf("InvalidParameterValue", "%s names no source: give IpRanges or Groups", p)
	}
	return out, nil
}

// ec2RuleProtocolPorts reads a permission's protocol and port range: ports
// are required for TCP and UDP, the ICMP type and code for ICMP, and
// ignored for all protocols (-1).
func ec2RuleProtocolPorts(r *http.Request, p, proto string) (SecurityGroupRule, error) {
	names := map[string]string{"6": "tcp", "17": "udp", "1": "icmp"}
	if n, ok := names[proto]; ok {
		proto = n
	}
	proto = strings.ToLower(proto)
	rule := SecurityGroupRule{Protocol: proto}
	lo, hi := int64(0), int64(65535)
	switch proto {
	case "-1":
		return rule, nil
	case "tcp", "udp":
	case "icmp":
		lo, hi = -1, 255
	default:
		return rule, awsErrorf("InvalidParameterValue", "Invalid value '%s' for IP protocol. Unknown protocol.", proto)
	}
	from, err1 := strconv.ParseInt(r.Form.Get(p+".FromPort"), 10, 32)
	to, err2 := strconv.ParseInt(r.Form.Get(p+".ToPort"), 10, 32)
	if err1 != nil || err2 != nil || from < lo || to > hi || to < lo || from > hi || proto != "icmp" && from > to {
		return rule, awsErrorf("InvalidParameterValue", "%s: invalid port range %q-%q for %s", p, r.Form.Get(p+".FromPort"), r.Form.Get(p+".ToPort"), proto)
	}
	rule.FromPort, rule.ToPort = int32(from), int32(to)
	return rule, nil
}

type authorizeIngressResponse struct {
	XMLName xml.Name `xml:"AuthorizeSecurityGroupIngressResponse"`
	ec2Response
	Return bool `xml:"return"`
}

// ec2AuthorizeSecurityGroupIngress adds the rules IpPermissions.N gives, all
// or none: one the group has already fails the call.
func (aws *AWS) ec2AuthorizeSecurityGroupIngress(r *http.Request) (any, error) {
	aws.mu.Lock()
	defer aws.mu.Unlock()
	g, err := aws.securityGroup(r)
	if err != nil {
		return nil, err
	}
	rules, err := aws.ec2IngressRules(r)
	if err != nil {
		return nil, err
	}
	for i, rule := range rules {
		if slices.Contains(g.Ingress, rule) || slices.Contains(rules[:i], rule) {
			return nil, awsErrorf("InvalidPermission.Duplicate", "the specified rule \"peer: %s, %s, ALLOW\" already exists", rule.source(), rule.Protocol)
		}
	}
	g.Ingress = append(g.Ingress, rules...)
	return &authorizeIngressResponse{Return: true}, nil
}

func (rule SecurityGroupRule) source() string {
	if rule.SourceGroupID != "" {
		return rule.SourceGroupID
	}
	return rule.CIDR
}

type revokeIngressResponse struct {
	XMLName xml.Name `xml:"RevokeSecurityGroupIngressResponse"`
	ec2Response
	Return  bool              `xml:"return"`
	Unknown []ec2IPPermission `xml:"unknownIpPermissionSet>item"`
}

// ec2RevokeSecurityGroupIngress removes the rules IpPermissions.N gives;
// those the group does not have are answered as unknown, not as an error,
// as EC2 does.
func (aws *AWS) ec2RevokeSecurityGroupIngress(r *http.Request) (any, error) {
	aws.mu.Lock()
	defer aws.mu.Unlock()
	g, err := aws.securityGroup(r)
	if err != nil {
		return nil, err
	}
	rules, err := aws.ec2IngressRules(r)
	if err != nil {
		return nil, err
	}
	var unknown []SecurityGroupRule
	for _, rule := range rules {
		i := slices.Index(g.Ingress, rule)
		if i < 0 {
			unknown = append(unknown, rule)
			continue
		}
		g.Ingress = slices.Delete(g.Ingress, i, i+1)
	}
	resp := &revokeIngressResponse{Return: true}
	if len(unknown) > 0 {
		resp.Unknown = ec2Permissions(unknown)
	}
	return resp, nil
}
