package awsemu

import (
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
)

// EC2Path is where Handler serves its view of the EC2 Query API (form-encoded
// POST, XML answers), for providers written against AWS: point their EC2
// endpoint at <base URL>/ec2. It shows the sim cloud's instances,
// as EC2 would describe them.
const EC2Path = "/ec2/"

// ec2Namespace is the XML namespace of EC2 API version 2016-11-15, the one the
// AWS SDKs speak.
const ec2Namespace = "http://ec2.amazonaws.com/doc/2016-11-15/"

// ec2OwnerID is the account every instance belongs to.
const ec2OwnerID = "000000000000"

// ec2Unsupported are real EC2 actions the sim cloud does not implement (those
// the upstream AWS provider may call, and a few common ones).
var ec2Unsupported = map[string]bool{
	"CreateRoute": true, "DeleteRoute": true, "DescribeNetworkInterfaces": true,
	"DescribeVpcs": true, "ModifyInstanceAttribute": true, "DescribeInstanceStatus": true,
	"RunInstances": true, "StartInstances": true, "StopInstances": true, "TerminateInstances": true,
	"DescribeImages": true, "DescribeVolumes": true, "CreateVolume": true, "AttachVolume": true,
	"DetachVolume": true, "DeleteVolume": true, "DescribeAddresses": true,
}

// ec2Handler serves the EC2 Query API: every call is a POST (or GET) with
// Action and Version and the call's parameters, flattened as EC2 does
// (InstanceId.1, Filter.1.Name, Filter.1.Value.1, ...).
func (aws *AWS) ec2Handler(w http.ResponseWriter, r *http.Request) {
	aws.serveQuery(w, r, queryAPI{
		service: "EC2",
		actions: map[string]queryAction{
			"DescribeInstances":             aws.ec2DescribeInstances,
			"DescribeAvailabilityZones":     aws.ec2DescribeAvailabilityZones,
			"DescribeRegions":               aws.ec2DescribeRegions,
			"DescribeInstanceTopology":      aws.ec2DescribeInstanceTopology,
			"CreateTags":                    aws.ec2CreateTags,
			"DeleteTags":                    aws.ec2DeleteTags,
			"DescribeSubnets":               aws.ec2DescribeSubnets,
			"DescribeRouteTables":           aws.ec2DescribeRouteTables,
			"DescribeSecurityGroups":        aws.ec2DescribeSecurityGroups,
			"CreateSecurityGroup":           aws.ec2CreateSecurityGroup,
			"DeleteSecurityGroup":           aws.ec2DeleteSecurityGroup,
			"AuthorizeSecurityGroupIngress": aws.ec2AuthorizeSecurityGroupIngress,
			"RevokeSecurityGroupIngress":    aws.ec2RevokeSecurityGroupIngress,
		},
		unsupported: ec2Unsupported,
		dryRun:      true,
		fault: func(status int, code, message string) *awsError {
			// EC2's own words for a throttled call.
			if status == http.StatusTooManyRequests {
				status, code = http.StatusServiceUnavailable, "RequestLimitExceeded"
			}
			return &awsError{status: status, code: code, message: message}
		},
		writeError:  writeEC2Error,
		writeResult: writeEC2Result,
	})
}

// writeEC2Result answers resp, which carries the request ID after its root
// element's start.
func writeEC2Result(w http.ResponseWriter, requestID, _ string, resp any) {
	setResponseRequestID(resp, requestID)
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(xml.Header))
	_ = xml.NewEncoder(w).Encode(resp)
}

// ec2Response is embedded in every response for its request ID.
type ec2Response struct {
	XMLNS     string `xml:"xmlns,attr"`
	RequestID string `xml:"requestId"`
}

func (r *ec2Response) setRequestID(id string) { r.XMLNS, r.RequestID = ec2Namespace, id }

func setResponseRequestID(resp any, id string) {
	if s, ok := resp.(interface{ setRequestID(string) }); ok {
		s.setRequestID(id)
	}
}

func writeEC2Error(w http.ResponseWriter, requestID string, e *awsError) {
	type errorXML struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	body := struct {
		XMLName   xml.Name   `xml:"Response"`
		Errors    []errorXML `xml:"Errors>Error"`
		RequestID string     `xml:"RequestID"`
	}{Errors: []errorXML{{Code: e.code, Message: e.message}}, RequestID: requestID}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(e.status)
	_, _ = w.Write([]byte(xml.Header))
	_ = xml.NewEncoder(w).Encode(body)
}

// ec2List reads a flattened list parameter: prefix.1, prefix.2, ...
func ec2List(r *http.Request, prefix string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := r.Form[prefix+"."+strconv.Itoa(i)]
		if !ok {
			return out
		}
		out = append(out, v...)
	}
}

// ec2Filter is one Filter.N: it matches when the attribute has any of the
// values; values may hold the wildcards * and ?.
type ec2Filter struct {
	name   string
	values []string
}

func ec2Filters(r *http.Request) ([]ec2Filter, error) {
	var out []ec2Filter
	for i := 1; ; i++ {
		p := "Filter." + strconv.Itoa(i)
		name, ok := r.Form[p+".Name"]
		if !ok {
			return out, nil
		}
		if len(name) != 1 || name[0] == "" {
			return nil, awsErrorf("InvalidParameterValue", "%s.Name must be given once", p)
		}
		out = append(out, ec2Filter{name: name[0], values: ec2List(r, p+".Value")})
	}
}

// matchFilters applies filters with EC2's semantics: all filters must match,
// each by any of its values. attrs gives an object's values for a filter
// name, and false for a filter name the action does not know.
func matchFilters(filters []ec2Filter, attrs func(name string) ([]string, bool)) (bool, error) {
	for _, f := range filters {
		have, known := attrs(f.name)
		if !known {
			return false, awsErrorf("InvalidParameterValue", "The filter '%s' is invalid", f.name)
		}
		if !anyMatch(f.values, have) {
			return false, nil
		}
	}
	return true, nil
}

func anyMatch(patterns, values []string) bool {
	for _, p := range patterns {
		for _, v := range values {
			if wildcardMatch(p, v) {
				return true
			}
		}
	}
	return false
}

// wildcardMatch matches s against p, where * is any run of characters and ?
// any one character (EC2 filter values).
func wildcardMatch(p, s string) bool {
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == s[si]):
			pi++
			si++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

type describeAvailabilityZonesResponse struct {
	XMLName xml.Name `xml:"DescribeAvailabilityZonesResponse"`
	ec2Response
	Zones []ec2Zone `xml:"availabilityZoneInfo>item"`
}

type ec2Zone struct {
	ZoneName           string     `xml:"zoneName"`
	ZoneID             string     `xml:"zoneId"`
	ZoneState          string     `xml:"zoneState"`
	RegionName         string     `xml:"regionName"`
	ZoneType           string     `xml:"zoneType"`
	GroupName          string     `xml:"groupName"`
	NetworkBorderGroup string     `xml:"networkBorderGroup"`
	OptInStatus        string     `xml:"optInStatus"`
	Messages           []struct{} `xml:"messageSet>item"`
}

func (z ec2Zone) filter(name string) ([]string, bool) {
	switch name {
	case "zone-name":
		return []string{z.ZoneName}, true
	case "zone-id":
		return []string{z.ZoneID}, true
	case "state":
		return []string{z.ZoneState}, true
	case "region-name":
		return []string{z.RegionName}, true
	case "zone-type":
		return []string{z.ZoneType}, true
	case "group-name":
		return []string{z.GroupName}, true
	case "opt-in-status":
		return []string{z.OptInStatus}, true
	}
	return nil, false
}

func (aws *AWS) ec2DescribeAvailabilityZones(r *http.Request) (any, error) {
	filters, err := ec2Filters(r)
	if err != nil {
		return nil, err
	}
	names, ids := ec2List(r, "ZoneName"), ec2List(r, "ZoneId")
	all := make([]ec2Zone, 0, len(aws.zones))
	for i, z := range aws.zones {
		all = append(all, ec2Zone{
			ZoneName: z, ZoneID: aws.zoneID(i), ZoneState: "available", RegionName: aws.region,
			ZoneType: "availability-zone", GroupName: aws.region, NetworkBorderGroup: aws.region,
			OptInStatus: "opt-in-not-required",
		})
	}
	known := func(want []string, attr func(ec2Zone) string) error {
		for _, w := range want {
			found := false
			for _, z := range all {
				found = found || attr(z) == w
			}
			if !found {
				return awsErrorf("InvalidParameterValue", "Invalid availability zone: [%s]", w)
			}
		}
		return nil
	}
	if err := known(names, func(z ec2Zone) string { return z.ZoneName }); err != nil {
		return nil, err
	}
	if err := known(ids, func(z ec2Zone) string { return z.ZoneID }); err != nil {
		return nil, err
	}
	resp := &describeAvailabilityZonesResponse{Zones: []ec2Zone{}}
	for _, z := range all {
		if len(names) > 0 && !anyMatch(names, []string{z.ZoneName}) || len(ids) > 0 && !anyMatch(ids, []string{z.ZoneID}) {
			continue
		}
		ok, err := matchFilters(filters, z.filter)
		if err != nil {
			return nil, err
		}
		if ok {
			resp.Zones = append(resp.Zones, z)
		}
	}
	return resp, nil
}

type describeRegionsResponse struct {
	XMLName xml.Name `xml:"DescribeRegionsResponse"`
	ec2Response
	Regions []ec2Region `xml:"regionInfo>item"`
}

type ec2Region struct {
	RegionName     string `xml:"regionName"`
	RegionEndpoint string `xml:"regionEndpoint"`
	OptInStatus    string `xml:"optInStatus"`
}

// ec2DescribeRegions lists the cloud's one region, whose endpoint is this
// server.
func (aws *AWS) ec2DescribeRegions(r *http.Request) (any, error) {
	filters, err := ec2Filters(r)
	if err != nil {
		return nil, err
	}
	region := ec2Region{RegionName: aws.region, RegionEndpoint: r.Host, OptInStatus: "opt-in-not-required"}
	for _, n := range ec2List(r, "RegionName") {
		if n != aws.region {
			return nil, awsErrorf("InvalidParameterValue", "Invalid region: %s", n)
		}
	}
	ok, err := matchFilters(filters, func(name string) ([]string, bool) {
		switch name {
		case "region-name":
			return []string{region.RegionName}, true
		case "endpoint":
			return []string{region.RegionEndpoint}, true
		case "opt-in-status":
			return []string{region.OptInStatus}, true
		}
		return nil, false
	})
	if err != nil {
		return nil, err
	}
	resp := &describeRegionsResponse{Regions: []ec2Region{}}
	if ok {
		resp.Regions = append(resp.Regions, region)
	}
	return resp, nil
}

// zoneIndex is the zone's position among the cloud's zones, -1 if unknown.
func (aws *AWS) zoneIndex(zone string) int {
	for i, z := range aws.zones {
		if z == zone {
			return i
		}
	}
	return -1
}

// zoneID gives zones AWS-style IDs: us-east-1's first zone is use1-az1.
func (aws *AWS) zoneID(i int) string {
	if i < 0 {
		return ""
	}
	parts := strings.Split(aws.region, "-")
	var b strings.Builder
	for j, p := range parts {
		switch {
		case j == 0:
			b.WriteString(p[:min(2, len(p))])
		case j == len(parts)-1:
			b.WriteString(p)
		case p != "":
			b.WriteByte(p[0])
		}
	}
	return fmt.Sprintf("%s-az%d", b.String(), i+1)
}

func (aws *AWS) vpcID() string { return "vpc-" + shortHash(aws.region) }

func (aws *AWS) subnetID(zoneIdx int) string {
	return "subnet-" + shortHash(aws.region+"/"+strconv.Itoa(zoneIdx))
}

// ec2PrivateDNSName is the name EC2 gives an instance from its private IPv4:
// ip-198-18-0-5.ec2.internal in us-east-1, ip-198-18-0-5.<region>.compute.internal
// elsewhere.
func (aws *AWS) ec2PrivateDNSName(ipv4 string) string {
	name := "ip-" + strings.ReplaceAll(ipv4, ".", "-")
	if aws.region == "us-east-1" {
		return name + ".ec2.internal"
	}
	return name + "." + aws.region + ".compute.internal"
}

// instanceMAC is the instance's one interface's MAC address, locally
// administered, derived from its ID.
func instanceMAC(id string) string {
	h := shortHash(id)
	return "02:" + h[0:2] + ":" + h[2:4] + ":" + h[4:6] + ":" + h[6:8] + ":" + h[8:10]
}

// shortHash is 17 hex digits derived from s, the length of EC2's resource
// IDs.
func shortHash(s string) string {
	h := fnv.New128a()
	_, _ = h.Write([]byte(s))
	return hex.EncodeToString(h.Sum(nil))[:17]
}
