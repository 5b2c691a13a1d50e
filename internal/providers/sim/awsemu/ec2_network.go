package awsemu

import (
	"encoding/xml"
	"fmt"
	"math/bits"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
)

// The cloud's network, as EC2 describes it: one VPC per region, one public
// subnet per zone (its route table sends 0.0.0.0/0 to an internet gateway),
// so that a load balancer for the internet can be placed in every zone. The
// sim cloud does not place instance addresses by zone: an instance's address
// need not be in its subnet's block.

// vpcCIDR is the VPC's block: the documentation range the cloud's addresses
// come from (instances, VIPs).
var vpcCIDR = netip.MustParsePrefix("198.18.0.0/15")

func (aws *AWS) internetGatewayID() string { return "igw-" + shortHash(aws.region+"/igw") }

func (aws *AWS) routeTableID() string { return "rtb-" + shortHash(aws.region+"/rtb") }

// subnetCIDR is zone i's block: the VPC's block split in as many equal
// parts as it takes for every zone to have one.
func (aws *AWS) subnetCIDR(i int) netip.Prefix {
	extra := bits.Len(uint(len(aws.zones) - 1))
	size := vpcCIDR.Bits() + extra
	base := vpcCIDR.Addr().As4()
	u := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	u += uint32(i) << (32 - size)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)}), size)
}

// arn is the ARN of one of the account's EC2 resources in the region.
func (aws *AWS) arn(kind, id string) string {
	return fmt.Sprintf("arn:aws:ec2:%s:%s:%s/%s", aws.region, ec2OwnerID, kind, id)
}

type describeSubnetsResponse struct {
	XMLName xml.Name `xml:"DescribeSubnetsResponse"`
	ec2Response
	Subnets []ec2Subnet `xml:"subnetSet>item"`
}

type ec2Subnet struct {
	SubnetID                string   `xml:"subnetId"`
	SubnetArn               string   `xml:"subnetArn"`
	State                   string   `xml:"state"`
	VpcID                   string   `xml:"vpcId"`
	OwnerID                 string   `xml:"ownerId"`
	CidrBlock               string   `xml:"cidrBlock"`
	AvailableIPAddressCount int      `xml:"availableIpAddressCount"`
	AvailabilityZone        string   `xml:"availabilityZone"`
	AvailabilityZoneID      string   `xml:"availabilityZoneId"`
	DefaultForAz            bool     `xml:"defaultForAz"`
	MapPublicIPOnLaunch     bool     `xml:"mapPublicIpOnLaunch"`
	Tags                    []ec2Tag `xml:"tagSet>item"`
}

func (s ec2Subnet) filter(name string) ([]string, bool) {
	switch name {
	case "subnet-id":
		return []string{s.SubnetID}, true
	case "subnet-arn":
		return []string{s.SubnetArn}, true
	case "vpc-id":
		return []string{s.VpcID}, true
	case "state":
		return []string{s.State}, true
	case "cidr-block", "cidr":
		return []string{s.CidrBlock}, true
	case "availability-zone":
		return []string{s.AvailabilityZone}, true
	case "availability-zone-id":
		return []string{s.AvailabilityZoneID}, true
	case "default-for-az":
		return []string{strconv.FormatBool(s.DefaultForAz)}, true
	case "owner-id":
		return []string{s.OwnerID}, true
	}
	return tagFilter(nil, name)
}

// subnets are the VPC's subnets, one per zone, in the zones' order.
func (aws *AWS) subnets() []ec2Subnet {
	out := make([]ec2Subnet, 0, len(aws.zones))
	for i, z := range aws.zones {
		block := aws.subnetCIDR(i)
		id := aws.subnetID(i)
		out = append(out, ec2Subnet{
			SubnetID: id, SubnetArn: aws.arn("subnet", id), State: "available", VpcID: aws.vpcID(),
			OwnerID: ec2OwnerID, CidrBlock: block.String(),
			// EC2 keeps 5 addresses of every subnet.
			AvailableIPAddressCount: 1<<(32-block.Bits()) - 5,
			AvailabilityZone:        z, AvailabilityZoneID: aws.zoneID(i),
			Tags: []ec2Tag{},
		})
	}
	return out
}

// subnetZoneIndex is the index of the zone of subnet id, -1 if the VPC has
// no such subnet.
func (aws *AWS) subnetZoneIndex(id string) int {
	for i := range aws.zones {
		if aws.subnetID(i) == id {
			return i
		}
	}
	return -1
}

var subnetIDPattern = regexp.MustCompile(`^subnet-([0-9a-f]{8}|[0-9a-f]{17})$`)

func (aws *AWS) ec2DescribeSubnets(r *http.Request) (any, error) {
	filters, err := ec2Filters(r)
	if err != nil {
		return nil, err
	}
	all := aws.subnets()
	ids := ec2List(r, "SubnetId")
	for _, id := range ids {
		if !subnetIDPattern.MatchString(id) {
			return nil, awsErrorf("InvalidSubnetID.Malformed", "Invalid id: %q", id)
		}
		if aws.subnetZoneIndex(id) < 0 {
			return nil, awsErrorf("InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist", id)
		}
	}
	resp := &describeSubnetsResponse{Subnets: []ec2Subnet{}}
	for _, s := range all {
		if len(ids) > 0 && !slices.Contains(ids, s.SubnetID) {
			continue
		}
		ok, err := matchFilters(filters, s.filter)
		if err != nil {
			return nil, err
		}
		if ok {
			resp.Subnets = append(resp.Subnets, s)
		}
	}
	return resp, nil
}

type describeRouteTablesResponse struct {
	XMLName xml.Name `xml:"DescribeRouteTablesResponse"`
	ec2Response
	RouteTables []ec2RouteTable `xml:"routeTableSet>item"`
}

type ec2RouteTable struct {
	RouteTableID    string                     `xml:"routeTableId"`
	VpcID           string                     `xml:"vpcId"`
	OwnerID         string                     `xml:"ownerId"`
	Routes          []ec2Route                 `xml:"routeSet>item"`
	Associations    []ec2RouteTableAssociation `xml:"associationSet>item"`
	PropagatingVgws []struct{}                 `xml:"propagatingVgwSet>item"`
	Tags            []ec2Tag                   `xml:"tagSet>item"`
}

type ec2Route struct {
	DestinationCidrBlock string `xml:"destinationCidrBlock"`
	GatewayID            string `xml:"gatewayId"`
	State                string `xml:"state"`
	Origin               string `xml:"origin"`
}

type ec2RouteTableAssociation struct {
	ID           string `xml:"routeTableAssociationId"`
	RouteTableID string `xml:"routeTableId"`
	Main         bool   `xml:"main"`
	State        struct {
		State string `xml:"state"`
	} `xml:"associationState"`
}

func (t ec2RouteTable) filter(name string) ([]string, bool) {
	switch name {
	case "route-table-id":
		return []string{t.RouteTableID}, true
	case "vpc-id":
		return []string{t.VpcID}, true
	case "owner-id":
		return []string{t.OwnerID}, true
	case "association.main":
		var out []string
		for _, a := range t.Associations {
			out = append(out, strconv.FormatBool(a.Main))
		}
		return out, true
	case "route.gateway-id":
		var out []string
		for _, r := range t.Routes {
			out = append(out, r.GatewayID)
		}
		return out, true
	case "route.destination-cidr-block":
		var out []string
		for _, r := range t.Routes {
			out = append(out, r.DestinationCidrBlock)
		}
		return out, true
	}
	return tagFilter(nil, name)
}

// routeTable is the VPC's main route table, which every subnet uses
// (none is associated explicitly): the VPC's block is local, the rest goes
// to the internet gateway.
func (aws *AWS) routeTable() ec2RouteTable {
	t := ec2RouteTable{
		RouteTableID: aws.routeTableID(), VpcID: aws.vpcID(), OwnerID: ec2OwnerID,
		Routes: []ec2Route{
			{DestinationCidrBlock: vpcCIDR.String(), GatewayID: "local", State: "active", Origin: "CreateRouteTable"},
			{DestinationCidrBlock: "0.0.0.0/0", GatewayID: aws.internetGatewayID(), State: "active", Origin: "CreateRoute"},
		},
		Associations: []ec2RouteTableAssociation{{ID: "rtbassoc-" + shortHash(aws.region+"/rtbassoc"), RouteTableID: aws.routeTableID(), Main: true}},
		Tags:         []ec2Tag{},
	}
	t.Associations[0].State.State = "associated"
	return t
}

var routeTableIDPattern = regexp.MustCompile(`^rtb-([0-9a-f]{8}|[0-9a-f]{17})$`)

func (aws *AWS) ec2DescribeRouteTables(r *http.Request) (any, error) {
	filters, err := ec2Filters(r)
	if err != nil {
		return nil, err
	}
	t := aws.routeTable()
	ids := ec2List(r, "RouteTableId")
	for _, id := range ids {
		if !routeTableIDPattern.MatchString(id) {
			return nil, awsErrorf("InvalidRouteTableID.Malformed", "Invalid id: %q", id)
		}
		if id != t.RouteTableID {
			return nil, awsErrorf("InvalidRouteTableID.NotFound", "The routeTable ID '%s' does not exist", id)
		}
	}
	resp := &describeRouteTablesResponse{RouteTables: []ec2RouteTable{}}
	ok, err := matchFilters(filters, t.filter)
	if err != nil {
		return nil, err
	}
	if ok {
		resp.RouteTables = append(resp.RouteTables, t)
	}
	return resp, nil
}
