package awsemu

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"testing"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// TestELBIsTheCloudsLoadBalancer: a load balancer made through the ELB API is
// one of the sim cloud's: the cloud's API shows it with a VIP, its listener
// as TCP to the instance port, the registered instances as backends, the
// ELB's tags and idle timeout; deleted through the cloud's API, ELB no
// longer has it.
func TestELBIsTheCloudsLoadBalancer(t *testing.T) {
	c, srv := ec2Cloud(t)
	decodeELB[struct{}](t, srv, createELB(c, "a1", "Tags.member.1.Key", "team", "Tags.member.1.Value", "x"))
	decodeELB[struct{}](t, srv, elbForm("RegisterInstancesWithLoadBalancer", "a1", "Instances.member.1.InstanceId", "i-00000001"))

	resp, err := http.Get(srv.URL + "/v1/loadbalancers/a1")
	if err != nil {
		t.Fatal(err)
	}
	var lb simcloud.LoadBalancer
	err = json.NewDecoder(resp.Body).Decode(&lb)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/loadbalancers/a1: %d %v", resp.StatusCode, err)
	}
	if lb.VIP == "" || !slices.Equal(lb.Listeners, []simcloud.Listener{{Protocol: "TCP", Port: 80, NodePort: 30080}}) ||
		!slices.Equal(lb.Backends, []simcloud.Backend{{Node: "a", Address: "198.18.0.5"}}) ||
		!maps.Equal(lb.Tags, map[string]string{"team": "x"}) || lb.IdleTimeoutSeconds != 60 {
		t.Errorf("the cloud's load balancer %+v", lb)
	}

	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/v1/loadbalancers/a1", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE /v1/loadbalancers/a1: %d", resp.StatusCode)
	}
	if e := c.ELBs(); len(e) != 0 {
		t.Errorf("ELBs after the cloud deleted a1: %+v", e)
	}
	expectELBError(t, srv, elbForm("DescribeLoadBalancers", "", "LoadBalancerNames.member.1", "a1"), http.StatusBadRequest, "LoadBalancerNotFound")
}

// TestELBSeesTheCloudsChanges: what the cloud's own API changes on a classic
// ELB shows through ELB (its backends as instances), what ELB changes shows
// in the cloud (the idle timeout), and the cloud's quota counts ELBs.
func TestELBSeesTheCloudsChanges(t *testing.T) {
	c, srv := ec2Cloud(t)
	decodeELB[struct{}](t, srv, createELB(c, "a1"))
	if _, err := c.cloud.SetBackends("a1", []simcloud.Backend{{Node: "b", Address: "198.18.0.6"}}, nil); err != nil {
		t.Fatal(err)
	}
	if lb := describeELB(t, srv, "a1").LBs[0]; !slices.Equal(lb.Instances, []string{"i-00000002"}) {
		t.Errorf("instances after the cloud set the backends: %v", lb.Instances)
	}
	decodeELB[struct{}](t, srv, elbForm("ModifyLoadBalancerAttributes", "a1", "LoadBalancerAttributes.ConnectionSettings.IdleTimeout", "120"))
	if lb, _ := c.cloud.GetLoadBalancer("a1"); lb.IdleTimeoutSeconds != 120 {
		t.Errorf("the cloud's idle timeout %d after ELB's 120", lb.IdleTimeoutSeconds)
	}
	c.cloud.SetSettings(simcloud.Settings{MaxLoadBalancers: 1})
	expectELBError(t, srv, createELB(c, "a2"), http.StatusBadRequest, "TooManyLoadBalancers")
}

// TestELBLeavesTheCloudsOwnLoadBalancers: a load balancer made through the
// cloud's own API is no classic ELB: ELB does not list it, will not make
// another of its name, and does not delete it.
func TestELBLeavesTheCloudsOwnLoadBalancers(t *testing.T) {
	c, srv := ec2Cloud(t)
	spec := simcloud.LoadBalancerSpec{Listeners: []simcloud.Listener{{Protocol: "TCP", Port: 80, NodePort: 30080}}}
	if _, err := c.cloud.PutLoadBalancer("own", spec, nil); err != nil {
		t.Fatal(err)
	}
	if got := decodeELB[describeELBsXML](t, srv, elbForm("DescribeLoadBalancers", "")); len(got.LBs) != 0 {
		t.Errorf("DescribeLoadBalancers lists %+v", got.LBs)
	}
	expectELBError(t, srv, createELB(c, "own"), http.StatusBadRequest, "DuplicateLoadBalancerName")
	decodeELB[struct{}](t, srv, elbForm("DeleteLoadBalancer", "own"))
	if _, ok := c.cloud.GetLoadBalancer("own"); !ok {
		t.Error("ELB's DeleteLoadBalancer deleted the cloud's own load balancer")
	}
}
