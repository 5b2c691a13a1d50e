package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	awsv1 "k8s.io/cloud-provider-aws/pkg/providers/v1"

	"github.com/outrigger-ccm/outrigger/pkg/conformance"
	"github.com/outrigger-ccm/outrigger/pkg/plugin"
)

// TestAWSConformance runs the conformance suite against the AWS provider
// with the sim cloud's EC2 API: initialized with a client builder, asked
// about an unknown instance by an ID of AWS's own form, and about the
// existing instances, and its classic ELB through the load balancer cases.
// The sim cloud does not emulate routes, so the run leaves them out; the
// instance cases are required to run.
func TestAWSConformance(t *testing.T) {
	_, _, simURL, instances := startCloud(t)
	useSimAWS(t, simURL)
	aws, err := cloudprovider.GetCloudProvider(awsv1.ProviderName, strings.NewReader(cloudConfig(simURL)))
	if err != nil {
		t.Fatal(err)
	}
	var nodes []*corev1.Node
	for _, in := range instances[1:] {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: in.Name}}
		n.Spec.ProviderID = "aws:///" + in.Zone + "/" + in.ID
		nodes = append(nodes, n)
	}
	results := conformance.Run(context.Background(), aws, conformance.Options{
		Nodes:             nodes,
		CallTimeout:       10 * time.Second,
		UnknownProviderID: "aws:///us-east-1a/i-0fffffffffffffff0",
		ClientBuilder:     plugin.ClientBuilderFor(kubeconfig),
		Capabilities:      []string{"Instances", "LoadBalancer"},
		Require:           []string{"Instances", "existing instance", "Initialize"},
	})
	var out bytes.Buffer
	if err := conformance.WriteText(&out, results); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	if n := conformance.Failed(results); n > 0 {
		t.Errorf("%d conformance cases failed", n)
	}
}
