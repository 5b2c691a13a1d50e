package awsemu

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// FuzzRequests feeds the AWS APIs (the EC2 and ELB Query APIs, the metadata
// service) arbitrary requests: each is answered, a malformed one with a 4xx
// saying what is wrong, never a panic or a 5xx (the cloud answers 5xx only
// for the faults it is told to inject).
func FuzzRequests(f *testing.F) {
	for _, seed := range []struct{ method, path, body string }{
		{"POST", "/ec2/", `Action=DescribeInstances&Filter.1.Name=private-dns-name&Filter.1.Value.1=x`},
		{"POST", "/ec2/", `Action=DescribeInstances&InstanceId.1=i-1&MaxResults=-1&NextToken=%ff`},
		{"POST", "/ec2/", `Action=AuthorizeSecurityGroupIngress&GroupId=sg-1&IpPermissions.1.IpProtocol=tcp&IpPermissions.1.FromPort=x`},
		{"POST", "/ec2/", `Action=CreateSecurityGroup&GroupName=g&GroupDescription=d&TagSpecification.1.ResourceType=security-group&TagSpecification.1.Tag.1.Key=k`},
		{"POST", "/elb/", `Action=CreateLoadBalancer&LoadBalancerName=a&Listeners.member.1.Protocol=tcp&Listeners.member.1.LoadBalancerPort=80&Listeners.member.1.InstancePort=30080&AvailabilityZones.member.1=sim-region-1a`},
		{"POST", "/elb/", `Action=ConfigureHealthCheck&LoadBalancerName=a&HealthCheck.Target=HTTP:1/&HealthCheck.Interval=5`},
		{"POST", "/elb/", `Action=DescribeLoadBalancers&PageSize=0&Marker=%ff`},
		{"GET", "/latest/meta-data/placement/availability-zone", ``},
		{"PUT", "/latest/api/token", ``},
	} {
		f.Add(seed.method, seed.path, seed.body)
	}
	f.Fuzz(func(t *testing.T, method, path, body string) {
		// What a server would have read off the wire: a request line that
		// does not parse never reaches the handler.
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + path + " HTTP/1.1\r\nHost: sim\r\n\r\n")))
		if err != nil || !strings.HasPrefix(path, "/") {
			return
		}
		req.Body = io.NopCloser(strings.NewReader(body))
		req.ContentLength = int64(len(body))
		req.RemoteAddr = "192.0.2.1:1234"
		cloud := simcloud.New("")
		if _, err := cloud.Create(simcloud.CreateRequest{Name: "a"}); err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=x")
		rec := httptest.NewRecorder()
		New(cloud).Handler().ServeHTTP(rec, req)
		if rec.Code >= http.StatusInternalServerError {
			t.Fatalf("%s %s %q: %d %s", method, path, body, rec.Code, rec.Body)
		}
	})
}
