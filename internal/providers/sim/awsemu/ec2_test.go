package awsemu

import (
	"encoding/xml"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// ec2Cloud is AWS over a sim cloud in us-east-1 with three instances: two running in
// different zones (one with a public address), one stopped.
func ec2Cloud(t *testing.T) (*AWS, *httptest.Server) {
	t.Helper()
	c := New(simcloud.New("us-east-1"))
	for _, req := range []simcloud.CreateRequest{
		{Name: "a", Type: "m5.large", Zone: "us-east-1a", Labels: map[string]string{"kubernetes.io/cluster/demo": "owned"},
			Addresses: []simcloud.Address{{Type: "InternalIP", Address: "198.18.0.5"}, {Type: "InternalDNS", Address: "ip-198-18-0-5.ec2.internal"}}},
		{Name: "b", Type: "c5.xlarge", Zone: "us-east-1b",
			Addresses: []simcloud.Address{{Type: "InternalIP", Address: "198.18.0.6"}, {Type: "ExternalIP", Address: "198.19.0.6"}, {Type: "InternalIP", Address: "fd00:ec2::6"}}},
		{Name: "c", Type: "m5.large", Zone: "us-east-1a", Addresses: []simcloud.Address{{Type: "InternalIP", Address: "198.18.0.7"}}},
	} {
		if _, err := c.cloud.Create(req); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.cloud.SetState("i-00000003", simcloud.StateStopped); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	return c, srv
}

// queryEndpoint is one of the sim's AWS Query APIs as a client calls it:
// its path, the version the SDK sends and the service its signature names.
type queryEndpoint struct{ path, version, service string }

var (
	ec2API = queryEndpoint{"/ec2", "2016-11-15", "ec2"}
	elbAPI = queryEndpoint{"/elb", "2012-06-01", "elasticloadbalancing"}
)

// queryCall posts a Query API call as the AWS SDKs do (signed: only the
// presence of the signature is checked).
func queryCall(t *testing.T, srv *httptest.Server, api queryEndpoint, form url.Values, signed bool) (int, string) {
	t.Helper()
	if form.Get("Version") == "" {
		form.Set("Version", api.version)
	}
	req, err := http.NewRequest(http.MethodPost, srv.URL+api.path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if signed {
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/"+api.service+"/aws4_request, SignedHeaders=host, Signature=00")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// ec2Call posts an EC2 Query API call.
func ec2Call(t *testing.T, srv *httptest.Server, form url.Values, signed bool) (int, string) {
	t.Helper()
	return queryCall(t, srv, ec2API, form, signed)
}

type instancesXML struct {
	XMLName      xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeInstancesResponse"`
	Reservations []struct {
		Instances []struct {
			ID             string `xml:"instanceId"`
			State          string `xml:"instanceState>name"`
			PrivateDNSName string `xml:"privateDnsName"`
			IPAddress      string `xml:"ipAddress"`
			Type           string `xml:"instanceType"`
			Zone           string `xml:"placement>availabilityZone"`
			ENIs           []struct {
				Status string   `xml:"status"`
				V4     []string `xml:"privateIpAddressesSet>item>privateIpAddress"`
				V6     []string `xml:"ipv6AddressesSet>item>ipv6Address"`
			} `xml:"networkInterfaceSet>item"`
			Tags []struct {
				Key   string `xml:"key"`
				Value string `xml:"value"`
			} `xml:"tagSet>item"`
		} `xml:"instancesSet>item"`
	} `xml:"reservationSet>item"`
	NextToken string `xml:"nextToken"`
}

func (x instancesXML) ids() []string {
	var out []string
	for _, r := range x.Reservations {
		for _, in := range r.Instances {
			out = append(out, in.ID)
		}
	}
	return out
}

type errorXML struct {
	Code    string `xml:"Errors>Error>Code"`
	Message string `xml:"Errors>Error>Message"`
}

func TestEC2DescribeInstancesFilters(t *testing.T) {
	_, srv := ec2Cloud(t)
	for _, tc := range []struct {
		name string
		form url.Values
		want []string
	}{
		{"all", url.Values{}, []string{"i-00000001", "i-00000002", "i-00000003"}},
		{"by ID", url.Values{"InstanceId.1": {"i-00000002"}}, []string{"i-00000002"}},
		{"private DNS name as given", url.Values{"Filter.1.Name": {"private-dns-name"}, "Filter.1.Value.1": {"ip-198-18-0-5.ec2.internal"}}, []string{"i-00000001"}},
		{"private DNS name as EC2 derives it", url.Values{"Filter.1.Name": {"private-dns-name"}, "Filter.1.Value.1": {"ip-198-18-0-6.ec2.internal"}}, []string{"i-00000002"}},
		{"no such name", url.Values{"Filter.1.Name": {"private-dns-name"}, "Filter.1.Value.1": {"ip-198-18-0-99.ec2.internal"}}, nil},
		{"any of the values", url.Values{"Filter.1.Name": {"instance-state-name"}, "Filter.1.Value.1": {"pending"}, "Filter.1.Value.2": {"stopped"}}, []string{"i-00000003"}},
		{"all of the filters", url.Values{
			"Filter.1.Name": {"instance-type"}, "Filter.1.Value.1": {"m5.large"},
			"Filter.2.Name": {"instance-state-name"}, "Filter.2.Value.1": {"running"},
		}, []string{"i-00000001"}},
		{"wildcards", url.Values{"Filter.1.Name": {"private-ip-address"}, "Filter.1.Value.1": {"198.18.0.?"}, "Filter.2.Name": {"availability-zone"}, "Filter.2.Value.1": {"*-1a"}}, []string{"i-00000001", "i-00000003"}},
		{"tag", url.Values{"Filter.1.Name": {"tag:kubernetes.io/cluster/demo"}, "Filter.1.Value.1": {"owned"}}, []string{"i-00000001"}},
		{"Name tag", url.Values{"Filter.1.Name": {"tag:Name"}, "Filter.1.Value.1": {"b"}}, []string{"i-00000002"}},
		{"IDs and filters", url.Values{"InstanceId.1": {"i-00000001"}, "InstanceId.2": {"i-00000002"}, "Filter.1.Name": {"ip-address"}, "Filter.1.Value.1": {"198.19.0.6"}}, []string{"i-00000002"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			form := tc.form
			form.Set("Action", "DescribeInstances")
			code, body := ec2Call(t, srv, form, true)
			if code != http.StatusOK {
				t.Fatalf("status %d: %s", code, body)
			}
			var got instancesXML
			if err := xml.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("%v\n%s", err, body)
			}
			if !slices.Equal(got.ids(), tc.want) {
				t.Errorf("got %v, want %v", got.ids(), tc.want)
			}
		})
	}
}

// TestEC2InstanceAsEC2DescribesIt checks the fields the AWS provider reads:
// state, type, zone, private DNS name, the addresses on an in-use interface,
// the public address, and the tags (labels, and the name as Name).
func TestEC2InstanceAsEC2DescribesIt(t *testing.T) {
	_, srv := ec2Cloud(t)
	code, body := ec2Call(t, srv, url.Values{"Action": {"DescribeInstances"}, "InstanceId.1": {"i-00000002"}}, true)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	var got instancesXML
	if err := xml.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	in := got.Reservations[0].Instances[0]
	if in.State != "running" || in.Type != "c5.xlarge" || in.Zone != "us-east-1b" || in.PrivateDNSName != "ip-198-18-0-6.ec2.internal" || in.IPAddress != "198.19.0.6" {
		t.Errorf("instance: %+v", in)
	}
	if len(in.ENIs) != 1 || in.ENIs[0].Status != "in-use" || !slices.Equal(in.ENIs[0].V4, []string{"198.18.0.6"}) || !slices.Equal(in.ENIs[0].V6, []string{"fd00:ec2::6"}) {
		t.Errorf("network interfaces: %+v", in.ENIs)
	}
	if len(in.Tags) != 1 || in.Tags[0].Key != "Name" || in.Tags[0].Value != "b" {
		t.Errorf("tags: %+v", in.Tags)
	}
}

func TestEC2DescribeInstancesPages(t *testing.T) {
	c, srv := ec2Cloud(t)
	for i := range 5 {
		if _, err := c.cloud.Create(simcloud.CreateRequest{Name: "more-" + string(rune('a'+i)), Addresses: []simcloud.Address{{Type: "InternalIP", Address: "198.18.1." + string(rune('1'+i))}}}); err != nil {
			t.Fatal(err)
		}
	}
	var all []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatal("too many pages")
		}
		form := url.Values{"Action": {"DescribeInstances"}, "MaxResults": {"5"}}
		if token != "" {
			form.Set("NextToken", token)
		}
		code, body := ec2Call(t, srv, form, true)
		if code != http.StatusOK {
			t.Fatalf("status %d: %s", code, body)
		}
		var got instancesXML
		if err := xml.Unmarshal([]byte(body), &got); err != nil {
			t.Fatal(err)
		}
		if len(got.ids()) > 5 {
			t.Fatalf("page of %d", len(got.ids()))
		}
		all = append(all, got.ids()...)
		if token = got.NextToken; token == "" {
			break
		}
	}
	if len(all) != 8 || !slices.IsSorted(all) || len(slices.Compact(slices.Clone(all))) != 8 {
		t.Errorf("pages gave %v, want the 8 instances once each", all)
	}
}

func TestEC2Errors(t *testing.T) {
	_, srv := ec2Cloud(t)
	for _, tc := range []struct {
		name     string
		form     url.Values
		unsigned bool
		status   int
		code     string
	}{
		{"unknown action", url.Values{"Action": {"LaunchRockets"}}, false, 400, "InvalidAction"},
		{"EC2 action the sim does not implement", url.Values{"Action": {"CreateRoute"}}, false, 400, "UnsupportedOperation"},
		{"no action", url.Values{}, false, 400, "MissingAction"},
		{"unsigned", url.Values{"Action": {"DescribeInstances"}}, true, 401, "AuthFailure"},
		{"instance not found", url.Values{"Action": {"DescribeInstances"}, "InstanceId.1": {"i-000000ff"}}, false, 400, "InvalidInstanceID.NotFound"},
		{"malformed instance ID", url.Values{"Action": {"DescribeInstances"}, "InstanceId.1": {"node-1"}}, false, 400, "InvalidInstanceID.Malformed"},
		{"unknown filter", url.Values{"Action": {"DescribeInstances"}, "Filter.1.Name": {"colour"}, "Filter.1.Value.1": {"blue"}}, false, 400, "InvalidParameterValue"},
		{"IDs with MaxResults", url.Values{"Action": {"DescribeInstances"}, "InstanceId.1": {"i-00000001"}, "MaxResults": {"5"}}, false, 400, "InvalidParameterCombination"},
		{"dry run", url.Values{"Action": {"DescribeInstances"}, "DryRun": {"true"}}, false, 412, "DryRunOperation"},
		{"unknown zone", url.Values{"Action": {"DescribeAvailabilityZones"}, "ZoneName.1": {"eu-west-1a"}}, false, 400, "InvalidParameterValue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := ec2Call(t, srv, tc.form, !tc.unsigned)
			var e errorXML
			if err := xml.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("%v\n%s", err, body)
			}
			if code != tc.status || e.Code != tc.code || e.Message == "" {
				t.Errorf("got %d %s %q, want %d %s\n%s", code, e.Code, e.Message, tc.status, tc.code, body)
			}
		})
	}
}

func TestEC2ThrottlingIsRequestLimitExceeded(t *testing.T) {
	c, srv := ec2Cloud(t)
	c.cloud.SetSettings(simcloud.Settings{ErrorRate: 1})
	code, body := ec2Call(t, srv, url.Values{"Action": {"DescribeInstances"}}, true)
	var e errorXML
	_ = xml.Unmarshal([]byte(body), &e)
	if code != http.StatusInternalServerError || e.Code != "InternalError" {
		t.Errorf("injected fault: %d %s", code, body)
	}
	c.cloud.SetSettings(simcloud.Settings{RateLimit: 0.001, RateBurst: 1})
	ec2Call(t, srv, url.Values{"Action": {"DescribeInstances"}}, true)
	code, body = ec2Call(t, srv, url.Values{"Action": {"DescribeInstances"}}, true)
	_ = xml.Unmarshal([]byte(body), &e)
	if code != http.StatusServiceUnavailable || e.Code != "RequestLimitExceeded" {
		t.Errorf("throttled: %d %s", code, body)
	}
	if n := c.cloud.Calls().ByOp["EC2:DescribeInstances"]; n != 3 {
		t.Errorf("counted %d DescribeInstances calls, want 3", n)
	}
}

func TestEC2DescribeAvailabilityZones(t *testing.T) {
	_, srv := ec2Cloud(t)
	type zonesXML struct {
		Zones []struct {
			Name   string `xml:"zoneName"`
			ID     string `xml:"zoneId"`
			Region string `xml:"regionName"`
		} `xml:"availabilityZoneInfo>item"`
	}
	code, body := ec2Call(t, srv, url.Values{"Action": {"DescribeAvailabilityZones"}}, true)
	var all zonesXML
	if err := xml.Unmarshal([]byte(body), &all); err != nil || code != http.StatusOK {
		t.Fatalf("%d %v\n%s", code, err, body)
	}
	if len(all.Zones) != 3 || all.Zones[0].Name != "us-east-1a" || all.Zones[0].ID != "use1-az1" || all.Zones[2].Region != "us-east-1" {
		t.Errorf("zones: %+v", all.Zones)
	}
	code, body = ec2Call(t, srv, url.Values{"Action": {"DescribeAvailabilityZones"}, "Filter.1.Name": {"zone-id"}, "Filter.1.Value.1": {"use1-az2"}}, true)
	var one zonesXML
	if err := xml.Unmarshal([]byte(body), &one); err != nil || code != http.StatusOK {
		t.Fatalf("%d %v\n%s", code, err, body)
	}
	if len(one.Zones) != 1 || one.Zones[0].Name != "us-east-1b" {
		t.Errorf("zone-id filter: %+v", one.Zones)
	}
}

func imdsGet(t *testing.T, srv *httptest.Server, path, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if token != "" {
		req.Header.Set("X-aws-ec2-metadata-token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func imdsSession(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/latest/api/token", nil)
	req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-aws-ec2-metadata-token-ttl-seconds") != "60" || len(b) == 0 {
		t.Fatalf("token: %d %q %s", resp.StatusCode, resp.Header, b)
	}
	return string(b)
}

func TestIMDS(t *testing.T) {
	c, srv := ec2Cloud(t)
	if err := c.SetMetadataInstance("b"); err != nil {
		t.Fatal(err)
	}
	if code, _ := imdsGet(t, srv, "/latest/meta-data/instance-id", ""); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401 (IMDSv2 only)", code)
	}
	if code, _ := imdsGet(t, srv, "/latest/meta-data/instance-id", "forged"); code != http.StatusUnauthorized {
		t.Errorf("with a forged token: %d, want 401", code)
	}
	tok := imdsSession(t, srv)
	mac := instanceMAC("i-00000002")
	for path, want := range map[string]string{
		"/latest/meta-data/instance-id":                                       "i-00000002",
		"/latest/meta-data/instance-type":                                     "c5.xlarge",
		"/latest/meta-data/placement/availability-zone":                       "us-east-1b",
		"/latest/meta-data/placement/availability-zone-id":                    "use1-az2",
		"/latest/meta-data/placement/region":                                  "us-east-1",
		"/latest/meta-data/local-ipv4":                                        "198.18.0.6",
		"/latest/meta-data/local-hostname":                                    "ip-198-18-0-6.ec2.internal",
		"/latest/meta-data/public-ipv4":                                       "198.19.0.6",
		"/latest/meta-data/mac":                                               mac,
		"/latest/meta-data/network/interfaces/macs/" + mac + "/local-ipv4s":   "198.18.0.6",
		"/latest/meta-data/network/interfaces/macs/" + mac + "/ipv6s":         "fd00:ec2::6",
		"/latest/meta-data/network/interfaces/macs/" + mac + "/device-number": "0",
		"/latest/meta-data/placement/":                                        "availability-zone\navailability-zone-id\nregion",
	} {
		if code, got := imdsGet(t, srv, path, tok); code != http.StatusOK || got != want {
			t.Errorf("%s: %d %q, want %q", path, code, got, want)
		}
	}
	if code, got := imdsGet(t, srv, "/latest/meta-data/", tok); code != http.StatusOK || !strings.Contains(got, "\nplacement/\n") || !strings.Contains(got, "\ninstance-id\n") {
		t.Errorf("listing: %d %q", code, got)
	}
	if code, got := imdsGet(t, srv, "/latest/dynamic/instance-identity/document", tok); code != http.StatusOK || !strings.Contains(got, `"region": "us-east-1"`) || !strings.Contains(got, `"instanceId": "i-00000002"`) {
		t.Errorf("identity document: %d %s", code, got)
	}
	if code, _ := imdsGet(t, srv, "/latest/meta-data/no-such-key", tok); code != http.StatusNotFound {
		t.Errorf("unknown key: %d, want 404", code)
	}
	if err := c.SetMetadataInstance(""); err != nil {
		t.Fatal(err)
	}
	if code, _ := imdsGet(t, srv, "/latest/meta-data/instance-id", tok); code != http.StatusNotFound {
		t.Errorf("with no instance: %d, want 404", code)
	}
	if err := c.SetMetadataInstance("nope"); err == nil {
		t.Error("SetMetadataInstance of an unknown instance: no error")
	}
	// The metadata service is the instance's, not a cloud API call.
	if n := c.cloud.Calls().Total; n != 0 {
		t.Errorf("metadata calls counted as cloud API calls: %d", n)
	}
}

func TestWildcardMatch(t *testing.T) {
	for _, tc := range []struct {
		p, s string
		want bool
	}{
		{"abc", "abc", true}, {"abc", "abd", false}, {"a*", "abc", true}, {"*c", "abc", true},
		{"a?c", "abc", true}, {"a?c", "ac", false}, {"*", "", true}, {"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false}, {"", "a", false},
	} {
		if got := wildcardMatch(tc.p, tc.s); got != tc.want {
			t.Errorf("wildcardMatch(%q, %q) = %v", tc.p, tc.s, got)
		}
	}
}

// TestEC2Tags: CreateTags and DeleteTags change the tags DescribeInstances
// shows, on every instance named or on none.
func TestEC2Tags(t *testing.T) {
	c, srv := ec2Cloud(t)
	tags := func(id string) map[string]string {
		in, _ := c.cloud.Get(id)
		return in.Labels
	}
	for _, tc := range []struct {
		name string
		form url.Values
		code int
		want map[string]string // i-00000002's labels after
	}{
		{"create", url.Values{"Action": {"CreateTags"}, "ResourceId.1": {"i-00000002"}, "ResourceId.2": {"i-00000003"},
			"Tag.1.Key": {"team"}, "Tag.1.Value": {"edge"}, "Tag.2.Key": {"cost"}}, 200, map[string]string{"team": "edge", "cost": ""}},
		{"unknown instance changes none", url.Values{"Action": {"CreateTags"}, "ResourceId.1": {"i-00000002"}, "ResourceId.2": {"i-0000ffff"},
			"Tag.1.Key": {"team"}, "Tag.1.Value": {"core"}}, 400, map[string]string{"team": "edge", "cost": ""}},
		{"delete only where the value matches", url.Values{"Action": {"DeleteTags"}, "ResourceId.1": {"i-00000002"},
			"Tag.1.Key": {"team"}, "Tag.1.Value": {"core"}, "Tag.2.Key": {"cost"}}, 200, map[string]string{"team": "edge"}},
		{"no resource", url.Values{"Action": {"DeleteTags"}, "Tag.1.Key": {"team"}}, 400, map[string]string{"team": "edge"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := ec2Call(t, srv, tc.form, true)
			if code != tc.code {
				t.Fatalf("status %d, want %d: %s", code, tc.code, body)
			}
			if got := tags("i-00000002"); !maps.Equal(got, tc.want) {
				t.Errorf("tags %v, want %v", got, tc.want)
			}
		})
	}
	if got := tags("i-00000003"); got["team"] != "edge" {
		t.Errorf("second instance's tags %v, want team=edge", got)
	}
}
