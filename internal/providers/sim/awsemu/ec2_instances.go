package awsemu

import (
	"encoding/base64"
	"encoding/xml"
	"errors"
	"maps"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// EC2's instances: the sim cloud's, as DescribeInstances shows them, and
// their tags (the instances' labels).

var instanceIDPattern = regexp.MustCompile(`^i-([0-9a-f]{8}|[0-9a-f]{17})$`)

type describeInstancesResponse struct {
	XMLName xml.Name `xml:"DescribeInstancesResponse"`
	ec2Response
	Reservations []ec2Reservation `xml:"reservationSet>item"`
	NextToken    string           `xml:"nextToken,omitempty"`
}

type ec2Reservation struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Groups        []struct{}    `xml:"groupSet>item"`
	Instances     []ec2Instance `xml:"instancesSet>item"`
}

type ec2Instance struct {
	InstanceID        string                `xml:"instanceId"`
	State             ec2State              `xml:"instanceState"`
	PrivateDNSName    string                `xml:"privateDnsName"`
	DNSName           string                `xml:"dnsName"`
	InstanceType      string                `xml:"instanceType"`
	Placement         ec2Placement          `xml:"placement"`
	SubnetID          string                `xml:"subnetId,omitempty"`
	VpcID             string                `xml:"vpcId,omitempty"`
	PrivateIPAddress  string                `xml:"privateIpAddress,omitempty"`
	IPAddress         string                `xml:"ipAddress,omitempty"`
	Architecture      string                `xml:"architecture"`
	NetworkInterfaces []ec2NetworkInterface `xml:"networkInterfaceSet>item"`
	Groups            []ec2GroupIdentifier  `xml:"groupSet>item"`
	Tags              []ec2Tag              `xml:"tagSet>item"`
}

// ec2GroupIdentifier names a security group an instance or interface is in.
type ec2GroupIdentifier struct {
	GroupID   string `xml:"groupId"`
	GroupName string `xml:"groupName"`
}

type ec2State struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type ec2Placement struct {
	AvailabilityZone   string `xml:"availabilityZone"`
	AvailabilityZoneID string `xml:"availabilityZoneId"`
	Tenancy            string `xml:"tenancy"`
}

type ec2NetworkInterface struct {
	NetworkInterfaceID string               `xml:"networkInterfaceId"`
	SubnetID           string               `xml:"subnetId"`
	VpcID              string               `xml:"vpcId"`
	OwnerID            string               `xml:"ownerId"`
	Status             string               `xml:"status"`
	MacAddress         string               `xml:"macAddress"`
	PrivateIPAddress   string               `xml:"privateIpAddress"`
	PrivateDNSName     string               `xml:"privateDnsName"`
	Attachment         ec2Attachment        `xml:"attachment"`
	PrivateIPAddresses []ec2PrivateIP       `xml:"privateIpAddressesSet>item"`
	IPv6Addresses      []ec2IPv6Address     `xml:"ipv6AddressesSet>item"`
	Association        *ec2IPAssociation    `xml:"association,omitempty"`
	Groups             []ec2GroupIdentifier `xml:"groupSet>item"`
}

type ec2Attachment struct {
	AttachmentID        string `xml:"attachmentId"`
	DeviceIndex         int    `xml:"deviceIndex"`
	Status              string `xml:"status"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
}

type ec2PrivateIP struct {
	PrivateIPAddress string            `xml:"privateIpAddress"`
	PrivateDNSName   string            `xml:"privateDnsName"`
	Primary          bool              `xml:"primary"`
	Association      *ec2IPAssociation `xml:"association,omitempty"`
}

type ec2IPAssociation struct {
	PublicIP      string `xml:"publicIp"`
	PublicDNSName string `xml:"publicDnsName"`
	IPOwnerID     string `xml:"ipOwnerId"`
}

type ec2IPv6Address struct {
	IPv6Address string `xml:"ipv6Address"`
}

type ec2Tag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

// ec2View is an instance as EC2 describes it, with what the filters look at.
type ec2View struct {
	ec2Instance
	tags map[string]string
}

// ec2Of describes in as EC2 would. Its private DNS name is its InternalDNS
// address, or the name EC2 derives from its private IPv4; its public address
// and name are its ExternalIP and ExternalDNS, which it loses when not
// running, as an EC2 instance loses its public IPv4 when stopped; a terminated
// instance has no network interface left.
func (aws *AWS) ec2Of(in simcloud.Instance) ec2View {
	zoneIdx := aws.zoneIndex(in.Zone)
	v := ec2View{ec2Instance: ec2Instance{
		InstanceID:   in.ID,
		InstanceType: in.Type,
		Architecture: "x86_64",
		Placement:    ec2Placement{AvailabilityZone: in.Zone, AvailabilityZoneID: aws.zoneID(zoneIdx), Tenancy: "default"},
	}, tags: map[string]string{}}
	switch in.State {
	case simcloud.StateRunning:
		v.State = ec2State{Code: 16, Name: "running"}
	case simcloud.StateStopped:
		v.State = ec2State{Code: 80, Name: "stopped"}
	default:
		v.State = ec2State{Code: 48, Name: "terminated"}
	}
	v.tags["Name"] = in.Name
	for k, val := range in.Labels {
		v.tags[k] = val
	}
	v.Tags = ec2TagSet(v.tags)
	if in.State == simcloud.StateTerminated {
		return v
	}
	v.VpcID = aws.vpcID()
	v.SubnetID = aws.subnetID(zoneIdx)
	// Every instance is in its VPC's default security group, as one
	// launched without naming a group is.
	v.Groups = []ec2GroupIdentifier{{GroupID: aws.defaultSecurityGroupID(), GroupName: "default"}}
	var v4, v6 []string
	for _, a := range in.Addresses {
		switch a.Type {
		case "InternalIP":
			if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
				v4 = append(v4, a.Address)
			} else if err == nil {
				v6 = append(v6, a.Address)
			}
		case "InternalDNS":
			if v.PrivateDNSName == "" {
				v.PrivateDNSName = a.Address
			}
		case "ExternalIP":
			if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() && v.IPAddress == "" && in.State == simcloud.StateRunning {
				v.IPAddress = a.Address
			}
		case "ExternalDNS":
			if v.DNSName == "" && in.State == simcloud.StateRunning {
				v.DNSName = a.Address
			}
		}
	}
	if len(v4) > 0 {
		v.PrivateIPAddress = v4[0]
		if v.PrivateDNSName == "" {
			v.PrivateDNSName = aws.ec2PrivateDNSName(v4[0])
		}
	}
	eni := ec2NetworkInterface{
		NetworkInterfaceID: "eni-" + strings.TrimPrefix(in.ID, "i-"),
		SubnetID:           v.SubnetID,
		VpcID:              v.VpcID,
		OwnerID:            ec2OwnerID,
		Status:             "in-use",
		MacAddress:         instanceMAC(in.ID),
		PrivateIPAddress:   v.PrivateIPAddress,
		PrivateDNSName:     v.PrivateDNSName,
		Attachment:         ec2Attachment{AttachmentID: "eni-attach-" + strings.TrimPrefix(in.ID, "i-"), Status: "attached", DeleteOnTermination: true},
		Groups:             v.Groups,
	}
	if v.IPAddress != "" {
		eni.Association = &ec2IPAssociation{PublicIP: v.IPAddress, PublicDNSName: v.DNSName, IPOwnerID: "amazon"}
	}
	for i, ip := range v4 {
		p := ec2PrivateIP{PrivateIPAddress: ip, Primary: i == 0}
		if i == 0 {
			p.PrivateDNSName = v.PrivateDNSName
			p.Association = eni.Association
		}
		eni.PrivateIPAddresses = append(eni.PrivateIPAddresses, p)
	}
	for _, ip := range v6 {
		eni.IPv6Addresses = append(eni.IPv6Addresses, ec2IPv6Address{IPv6Address: ip})
	}
	v.NetworkInterfaces = []ec2NetworkInterface{eni}
	return v
}

// filter gives the instance's values for a DescribeInstances filter name.
func (v ec2View) filter(name string) ([]string, bool) {
	one := func(s string) []string {
		if s == "" {
			return nil
		}
		return []string{s}
	}
	switch name {
	case "instance-id":
		return one(v.InstanceID), true
	case "private-dns-name":
		return one(v.PrivateDNSName), true
	case "dns-name":
		return one(v.DNSName), true
	case "instance-state-name":
		return one(v.State.Name), true
	case "instance-state-code":
		return one(strconv.Itoa(v.State.Code)), true
	case "instance-type":
		return one(v.InstanceType), true
	case "availability-zone":
		return one(v.Placement.AvailabilityZone), true
	case "private-ip-address":
		return one(v.PrivateIPAddress), true
	case "ip-address":
		return one(v.IPAddress), true
	case "vpc-id":
		return one(v.VpcID), true
	case "subnet-id":
		return one(v.SubnetID), true
	case "owner-id":
		return one(ec2OwnerID), true
	case "instance.group-id":
		ids := make([]string, 0, len(v.Groups))
		for _, g := range v.Groups {
			ids = append(ids, g.GroupID)
		}
		return ids, true
	}
	return tagFilter(v.tags, name)
}

// tagFilter gives a resource's values for the tag filters every Describe
// action takes: tag-key, tag-value and tag:<key>.
func tagFilter(tags map[string]string, name string) ([]string, bool) {
	switch name {
	case "tag-key":
		return slices.Collect(maps.Keys(tags)), true
	case "tag-value":
		return slices.Collect(maps.Values(tags)), true
	}
	if key, ok := strings.CutPrefix(name, "tag:"); ok {
		if val, has := tags[key]; has {
			return []string{val}, true
		}
		return nil, true
	}
	return nil, false
}

// ec2TagSet lists tags as EC2 does, sorted by key.
func ec2TagSet(tags map[string]string) []ec2Tag {
	out := make([]ec2Tag, 0, len(tags))
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		out = append(out, ec2Tag{Key: k, Value: tags[k]})
	}
	return out
}

func (aws *AWS) ec2DescribeInstances(r *http.Request) (any, error) {
	ids := ec2List(r, "InstanceId")
	filters, err := ec2Filters(r)
	if err != nil {
		return nil, err
	}
	maxResults := 0
	if s := r.Form.Get("MaxResults"); s != "" {
		if len(ids) > 0 {
			return nil, awsErrorf("InvalidParameterCombination", "The parameter instancesSet cannot be used with the parameter maxResults")
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 5 || n > 1000 {
			return nil, awsErrorf("InvalidParameterValue", "Value ( %s ) for parameter maxResults is invalid. Expecting a value between 5 and 1000.", s)
		}
		maxResults = n
	}
	after := ""
	if tok := r.Form.Get("NextToken"); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || !instanceIDPattern.Match(b) {
			return nil, awsErrorf("InvalidParameterValue", "Invalid value '%s' for nextToken", tok)
		}
		after = string(b)
	}
	for _, id := range ids {
		if !instanceIDPattern.MatchString(id) {
			return nil, awsErrorf("InvalidInstanceID.Malformed", "Invalid id: %q", id)
		}
	}

	byID := map[string]simcloud.Instance{}
	for _, in := range aws.cloud.List() {
		byID[in.ID] = in
	}
	var missing []string
	var candidates []simcloud.Instance
	if len(ids) > 0 {
		seen := map[string]bool{}
		for _, id := range ids {
			if in, ok := byID[id]; !ok {
				missing = append(missing, id)
			} else if !seen[id] {
				seen[id] = true
				candidates = append(candidates, in)
			}
		}
	} else {
		for _, in := range byID {
			candidates = append(candidates, in)
		}
	}
	views := make([]ec2View, 0, len(candidates))
	for _, in := range candidates {
		views = append(views, aws.ec2Of(in))
	}

	switch len(missing) {
	case 0:
	case 1:
		return nil, awsErrorf("InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", missing[0])
	default:
		return nil, awsErrorf("InvalidInstanceID.NotFound", "The instance IDs '%s' do not exist", strings.Join(missing, ", "))
	}
	sort.Slice(views, func(i, j int) bool { return views[i].InstanceID < views[j].InstanceID })
	resp := &describeInstancesResponse{Reservations: []ec2Reservation{}}
	for _, v := range views {
		if after != "" && v.InstanceID <= after {
			continue
		}
		ok, err := matchFilters(filters, v.filter)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if maxResults > 0 && len(resp.Reservations) == maxResults {
			last := resp.Reservations[len(resp.Reservations)-1].Instances[0].InstanceID
			resp.NextToken = base64.RawURLEncoding.EncodeToString([]byte(last))
			break
		}
		resp.Reservations = append(resp.Reservations, ec2Reservation{
			ReservationID: "r-" + strings.TrimPrefix(v.InstanceID, "i-"),
			OwnerID:       ec2OwnerID,
			Instances:     []ec2Instance{v.ec2Instance},
		})
	}
	return resp, nil
}

type describeInstanceTopologyResponse struct {
	XMLName xml.Name `xml:"DescribeInstanceTopologyResponse"`
	ec2Response
	Instances []struct{} `xml:"instanceSet>item"`
}

// ec2DescribeInstanceTopology answers that no instance has a network topology:
// the sim cloud has none, as EC2 has none for most instance types.
func (aws *AWS) ec2DescribeInstanceTopology(r *http.Request) (any, error) {
	if _, err := ec2Filters(r); err != nil {
		return nil, err
	}
	for _, id := range ec2List(r, "InstanceId") {
		if !instanceIDPattern.MatchString(id) {
			return nil, awsErrorf("InvalidInstanceID.Malformed", "Invalid id: %q", id)
		}
	}
	return &describeInstanceTopologyResponse{Instances: []struct{}{}}, nil
}

// ec2TagsResponse answers CreateTags and DeleteTags.
type ec2TagsResponse struct {
	XMLName xml.Name
	ec2Response
	Return bool `xml:"return"`
}

// ec2Tags reads <prefix>.N.Key and <prefix>.N.Value (Tag.1.Key, ...); a key
// without a value has "".
func ec2Tags(r *http.Request, prefix string) (keys, values []string, err error) {
	for i := 1; ; i++ {
		p := prefix + "." + strconv.Itoa(i)
		k, ok := r.Form[p+".Key"]
		if !ok {
			return keys, values, nil
		}
		if len(k) != 1 || k[0] == "" || len(k[0]) > 128 {
			return nil, nil, awsErrorf("InvalidParameterValue", "%s.Key must be given once, 1 to 128 characters", p)
		}
		keys = append(keys, k[0])
		values = append(values, r.Form.Get(p+".Value"))
	}
}

// ec2TagInstances applies change to the labels (the EC2 tags) of every
// instance in ResourceId.N, all or none: an unknown or malformed ID fails
// the call before any instance changes, as EC2's does.
func (aws *AWS) ec2TagInstances(r *http.Request, change func(labels map[string]string, keys, values []string)) error {
	ids := ec2List(r, "ResourceId")
	if len(ids) == 0 {
		return awsErrorf("MissingParameter", "The request must contain the parameter resourceIdSet")
	}
	keys, values, err := ec2Tags(r, "Tag")
	if err != nil {
		return err
	}
	for _, id := range ids {
		if !instanceIDPattern.MatchString(id) {
			return awsErrorf("InvalidID", "The ID '%s' is not valid", id)
		}
		// Get finds instances by name too: only the ID counts here.
		if in, ok := aws.cloud.Get(id); !ok || in.ID != id {
			return awsErrorf("InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", id)
		}
	}
	err = aws.cloud.ChangeLabels(ids, func(labels map[string]string) { change(labels, keys, values) })
	if errors.Is(err, simcloud.ErrInstanceNotFound) {
		// Deleted since it was found above.
		return awsErrorf("InvalidInstanceID.NotFound", "%v", err)
	}
	return err
}

func (aws *AWS) ec2CreateTags(r *http.Request) (any, error) {
	if err := aws.ec2TagInstances(r, func(labels map[string]string, keys, values []string) {
		for i, k := range keys {
			labels[k] = values[i]
		}
	}); err != nil {
		return nil, err
	}
	return &ec2TagsResponse{XMLName: xml.Name{Local: "CreateTagsResponse"}, Return: true}, nil
}

// ec2DeleteTags deletes each Tag.N.Key, only where its value matches when
// Tag.N.Value is given.
func (aws *AWS) ec2DeleteTags(r *http.Request) (any, error) {
	if err := aws.ec2TagInstances(r, func(labels map[string]string, keys, values []string) {
		for i, k := range keys {
			if _, given := r.Form["Tag."+strconv.Itoa(i+1)+".Value"]; !given || labels[k] == values[i] {
				delete(labels, k)
			}
		}
	}); err != nil {
		return nil, err
	}
	return &ec2TagsResponse{XMLName: xml.Name{Local: "DeleteTagsResponse"}, Return: true}, nil
}
