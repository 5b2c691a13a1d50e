package awsemu

import (
	"encoding/xml"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
)

type subnetsXML struct {
	Subnets []struct {
		ID    string `xml:"subnetId"`
		VPC   string `xml:"vpcId"`
		Zone  string `xml:"availabilityZone"`
		CIDR  string `xml:"cidrBlock"`
		State string `xml:"state"`
	} `xml:"subnetSet>item"`
}

// TestEC2DescribeSubnets: the VPC has one subnet per zone, each a part of
// the VPC's block, the one the instances in that zone are in.
func TestEC2DescribeSubnets(t *testing.T) {
	c, srv := ec2Cloud(t)
	all := decodeEC2[subnetsXML](t, srv, url.Values{"Action": {"DescribeSubnets"}})
	var zones, cidrs []string
	for _, s := range all.Subnets {
		if s.VPC != c.vpcID() || s.State != "available" {
			t.Errorf("subnet %+v: want available, in %s", s, c.vpcID())
		}
		zones, cidrs = append(zones, s.Zone), append(cidrs, s.CIDR)
	}
	if !slices.Equal(zones, []string{"us-east-1a", "us-east-1b", "us-east-1c"}) || !slices.Equal(cidrs, []string{"198.18.0.0/17", "198.18.128.0/17", "198.19.0.0/17"}) {
		t.Errorf("subnets in %v with %v; want one in each zone, the VPC's block split", zones, cidrs)
	}
	b, _ := c.cloud.Get("b")
	inB := c.ec2Of(b).SubnetID
	for _, tc := range []struct {
		name string
		form url.Values
		want []string // zones
	}{
		{"by ID", url.Values{"SubnetId.1": {inB}}, []string{"us-east-1b"}},
		{"by VPC", url.Values{"Filter.1.Name": {"vpc-id"}, "Filter.1.Value.1": {c.vpcID()}}, zones},
		{"by zone", url.Values{"Filter.1.Name": {"availability-zone"}, "Filter.1.Value.1": {"us-east-1c"}}, []string{"us-east-1c"}},
		{"other VPC", url.Values{"Filter.1.Name": {"vpc-id"}, "Filter.1.Value.1": {"vpc-0123456789abcdef0"}}, nil},
		{"untagged", url.Values{"Filter.1.Name": {"tag-key"}, "Filter.1.Value.1": {"*"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.form.Set("Action", "DescribeSubnets")
			var got []string
			for _, s := range decodeEC2[subnetsXML](t, srv, tc.form).Subnets {
				got = append(got, s.Zone)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestEC2DescribeRouteTables: the VPC's main route table, which every
// subnet uses, sends all but the VPC's block to an internet gateway: the
// subnets are public.
func TestEC2DescribeRouteTables(t *testing.T) {
	c, srv := ec2Cloud(t)
	type tablesXML struct {
		Tables []struct {
			ID     string `xml:"routeTableId"`
			VPC    string `xml:"vpcId"`
			Routes []struct {
				Destination string `xml:"destinationCidrBlock"`
				Gateway     string `xml:"gatewayId"`
			} `xml:"routeSet>item"`
			Main []bool `xml:"associationSet>item>main"`
		} `xml:"routeTableSet>item"`
	}
	got := decodeEC2[tablesXML](t, srv, url.Values{"Action": {"DescribeRouteTables"}, "Filter.1.Name": {"vpc-id"}, "Filter.1.Value.1": {c.vpcID()}})
	if len(got.Tables) != 1 {
		t.Fatalf("route tables %+v, want the VPC's one", got.Tables)
	}
	rt := got.Tables[0]
	if rt.VPC != c.vpcID() || !slices.Equal(rt.Main, []bool{true}) || len(rt.Routes) != 2 ||
		rt.Routes[0].Gateway != "local" || rt.Routes[1].Destination != "0.0.0.0/0" || rt.Routes[1].Gateway != c.internetGatewayID() {
		t.Errorf("route table %+v: want the VPC's main one, local and 0.0.0.0/0 to an internet gateway", rt)
	}
	none := decodeEC2[tablesXML](t, srv, url.Values{"Action": {"DescribeRouteTables"}, "Filter.1.Name": {"association.main"}, "Filter.1.Value.1": {"false"}})
	if len(none.Tables) != 0 {
		t.Errorf("association.main=false: %+v, want none", none.Tables)
	}
}

func TestEC2NetworkErrors(t *testing.T) {
	_, srv := ec2Cloud(t)
	for _, tc := range []struct {
		name string
		form url.Values
		code string
	}{
		{"unknown subnet", url.Values{"Action": {"DescribeSubnets"}, "SubnetId.1": {"subnet-0123456789abcdef0"}}, "InvalidSubnetID.NotFound"},
		{"malformed subnet ID", url.Values{"Action": {"DescribeSubnets"}, "SubnetId.1": {"net-1"}}, "InvalidSubnetID.Malformed"},
		{"unknown subnet filter", url.Values{"Action": {"DescribeSubnets"}, "Filter.1.Name": {"colour"}, "Filter.1.Value.1": {"blue"}}, "InvalidParameterValue"},
		{"unknown route table", url.Values{"Action": {"DescribeRouteTables"}, "RouteTableId.1": {"rtb-0123456789abcdef0"}}, "InvalidRouteTableID.NotFound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expectEC2Error(t, srv, tc.form, tc.code)
		})
	}
}

// decodeEC2 makes an EC2 call that must succeed and decodes its answer.
func decodeEC2[T any](t *testing.T, srv *httptest.Server, form url.Values) T {
	t.Helper()
	var out T
	code, body := ec2Call(t, srv, form, true)
	if code != http.StatusOK {
		t.Fatalf("%s: status %d: %s", form.Get("Action"), code, body)
	}
	if err := xml.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("%s: %v\n%s", form.Get("Action"), err, body)
	}
	return out
}

// expectEC2Error makes an EC2 call that must fail with code, status 400.
func expectEC2Error(t *testing.T, srv *httptest.Server, form url.Values, code string) {
	t.Helper()
	status, body := ec2Call(t, srv, form, true)
	var e errorXML
	if err := xml.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	if status != http.StatusBadRequest || e.Code != code || e.Message == "" {
		t.Errorf("%s: got %d %s %q, want 400 %s", form.Get("Action"), status, e.Code, e.Message, code)
	}
}
