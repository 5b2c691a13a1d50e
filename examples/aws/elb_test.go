package main

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/internal/poll"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/awsemu"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// lbCleanupFinalizer is the finalizer the service controller keeps on a
// Service while its load balancer may exist.
const lbCleanupFinalizer = "service.kubernetes.io/load-balancer-cleanup"

// serviceGetsClassicELB creates a LoadBalancer Service, without annotations,
// through a running AWS cloud-controller-manager whose nodes are initialized:
// AWS's own code makes a classic ELB in the sim cloud (its listener, the
// nodes' instances, a health check, the cluster's and the Service's tags, a
// security group of its own that the instances admit), which is the sim
// cloud's own load balancer of that name, the Service shows the
// ELB's DNS name; a node excluded from load balancers leaves it; deleted, the
// Service takes the ELB and the group with it.
func serviceGetsClassicELB(t *testing.T, cloud *simcloud.Cloud, aws *awsemu.AWS, instances []simcloud.Instance) {
	t.Helper()
	ctx := context.Background()
	svcs := client.CoreV1().Services(metav1.NamespaceDefault)
	svc, err := svcs.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svcs.Delete(ctx, svc.Name, metav1.DeleteOptions{}) })
	nodePort := svc.Spec.Ports[0].NodePort
	name := cloudprovider.DefaultLoadBalancerName(svc)

	var wantInstances []string
	for _, in := range instances {
		wantInstances = append(wantInstances, in.ID)
	}
	var elb awsemu.ELB
	poll.Until(t, 90*time.Second, "the Service's ELB with the nodes' instances, its DNS name on the Service", func() bool {
		elbs := aws.ELBs()
		if len(elbs) != 1 {
			return false
		}
		elb = elbs[0]
		svc, err = svcs.Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ingress := svc.Status.LoadBalancer.Ingress
		return len(ingress) == 1 && ingress[0].Hostname == elb.DNSName && slices.Equal(slices.Sorted(slices.Values(elb.Instances)), wantInstances)
	})
	t.Logf("Service %s/%s: ELB %s at %s", svc.Namespace, svc.Name, elb.Name, elb.DNSName)
	if elb.Name != name || elb.Scheme != "internet-facing" || !strings.HasSuffix(elb.DNSName, ".us-east-1.elb.amazonaws.com") {
		t.Errorf("ELB %s (%s) at %s, want %s, internet-facing, in us-east-1", elb.Name, elb.Scheme, elb.DNSName, name)
	}
	if want := []awsemu.ELBListener{{Protocol: "TCP", LoadBalancerPort: 80, InstanceProtocol: "TCP", InstancePort: nodePort}}; !slices.Equal(elb.Listeners, want) {
		t.Errorf("listeners %+v, want %+v", elb.Listeners, want)
	}
	if want := "TCP:" + strconv.Itoa(int(nodePort)); elb.HealthCheck.Target != want {
		t.Errorf("health check %+v, want target %s", elb.HealthCheck, want)
	}
	if len(elb.Subnets) != 3 {
		t.Errorf("subnets %v, want one in each of the 3 zones", elb.Subnets)
	}
	for k, want := range map[string]string{"kubernetes.io/cluster/" + clusterID: "owned", "kubernetes.io/service-name": "default/web"} {
		if got, ok := elb.Tags[k]; !ok || got != want {
			t.Errorf("ELB tag %s=%q, want %q (tags %v)", k, got, want, elb.Tags)
		}
	}
	if !slices.Contains(svc.Finalizers, lbCleanupFinalizer) {
		t.Errorf("Service finalizers %v, want %s", svc.Finalizers, lbCleanupFinalizer)
	}
	group := elbSecurityGroup(t, aws, elb)
	sameLoadBalancer(t, cloud, elb, nodePort)

	// A node excluded from load balancers leaves the ELB: UpdateLoadBalancer
	// deregisters its instance.
	excluded := instances[len(instances)-1]
	patch := `{"metadata":{"labels":{"` + corev1.LabelNodeExcludeBalancers + `":"true"}}}`
	if _, err := client.CoreV1().Nodes().Patch(ctx, excluded.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 90*time.Second, "instance "+excluded.ID+" of the excluded node deregistered from the ELB", func() bool {
		elbs := aws.ELBs()
		return len(elbs) == 1 && slices.Equal(slices.Sorted(slices.Values(elbs[0].Instances)), wantInstances[:len(wantInstances)-1])
	})

	if err := svcs.Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 90*time.Second, "the ELB and its security group deleted, the Service's finalizer removed", func() bool {
		_, err := svcs.Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return apierrors.IsNotFound(err) && len(aws.ELBs()) == 0 && len(cloud.LoadBalancers()) == 0 && !slices.ContainsFunc(aws.SecurityGroups(), func(g awsemu.SecurityGroup) bool { return g.ID == group })
	})
	for _, g := range aws.SecurityGroups() {
		for _, rule := range g.Ingress {
			if rule.SourceGroupID == group {
				t.Errorf("security group %s still admits the deleted %s: %+v", g.ID, group, rule)
			}
		}
	}
	calls := cloud.Calls()
	for _, op := range []string{"ELB:CreateLoadBalancer", "ELB:RegisterInstancesWithLoadBalancer", "ELB:ConfigureHealthCheck",
		"ELB:DeregisterInstancesFromLoadBalancer", "ELB:DeleteLoadBalancer", "EC2:CreateSecurityGroup", "EC2:DeleteSecurityGroup"} {
		if calls.ByOp[op] == 0 {
			t.Errorf("no %s call reached the sim cloud", op)
		}
	}
	t.Logf("calls AWS's code made: %v", calls.ByOp)
}

// sameLoadBalancer checks that the ELB is the sim cloud's load balancer of
// that name, as the cloud's own API shows it: a VIP, the listener as TCP to
// the node port, the nodes' instances as backends, the ELB's tags.
func sameLoadBalancer(t *testing.T, cloud *simcloud.Cloud, elb awsemu.ELB, nodePort int32) {
	t.Helper()
	lb, ok := cloud.GetLoadBalancer(elb.Name)
	if !ok {
		t.Fatalf("ELB %s is not among the sim cloud's load balancers %v", elb.Name, cloud.LoadBalancers())
	}
	var nodes []string
	for _, b := range lb.Backends {
		in, _ := cloud.Get(b.Node)
		nodes = append(nodes, in.ID)
	}
	slices.Sort(nodes)
	if want := []simcloud.Listener{{Protocol: "TCP", Port: 80, NodePort: nodePort}}; lb.VIP == "" || !slices.Equal(lb.Listeners, want) ||
		!slices.Equal(nodes, slices.Sorted(slices.Values(elb.Instances))) || !maps.Equal(lb.Tags, elb.Tags) {
		t.Errorf("the sim cloud's load balancer %+v, want a VIP, listeners %+v, the ELB's instances %v and tags %v", lb, want, elb.Instances, elb.Tags)
	}
}

// elbSecurityGroup checks the group AWS made for the ELB: its first, owned
// by the cluster, open on the Service's port to everyone, and admitted by
// the group the instances are in. It returns its ID.
func elbSecurityGroup(t *testing.T, aws *awsemu.AWS, elb awsemu.ELB) string {
	t.Helper()
	groups := aws.SecurityGroups()
	i := slices.IndexFunc(groups, func(g awsemu.SecurityGroup) bool { return g.ID == elb.SecurityGroups[0] })
	if i < 0 {
		t.Fatalf("ELB's security group %s not in the cloud", elb.SecurityGroups[0])
	}
	g := groups[i]
	if g.Name != "k8s-elb-"+elb.Name || g.Tags["kubernetes.io/cluster/"+clusterID] != "owned" {
		t.Errorf("ELB's security group %s named %q, tags %v; want k8s-elb-%s owned by the cluster", g.ID, g.Name, g.Tags, elb.Name)
	}
	if want := (awsemu.SecurityGroupRule{Protocol: "tcp", FromPort: 80, ToPort: 80, CIDR: "0.0.0.0/0"}); !slices.Contains(g.Ingress, want) {
		t.Errorf("ELB's security group admits %+v, want %+v among them", g.Ingress, want)
	}
	admitted := slices.ContainsFunc(groups, func(o awsemu.SecurityGroup) bool {
		return o.Name == "default" && slices.Contains(o.Ingress, awsemu.SecurityGroupRule{Protocol: "-1", SourceGroupID: g.ID})
	})
	if !admitted {
		t.Errorf("the instances' group does not admit traffic from the ELB's group %s", g.ID)
	}
	return g.ID
}
