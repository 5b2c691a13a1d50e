package provider

import (
	"context"
	"errors"
	"testing"

	"github.com/outrigger-ccm/outrigger/internal/providertest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/fake"
)

func TestInstancesV1ProviderIsAdapted(t *testing.T) {
	boom := errors.New("boom")
	v1Cloud := func(mutate func(*fake.Cloud)) *fake.Cloud {
		c := &fake.Cloud{
			ExistsByProviderID: true,
			Addresses:          []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.1.1"}},
			ExtID:              map[types.NodeName]string{"a": "id-a"},
			ExtIDErr:           map[types.NodeName]error{"nobody": cloudprovider.InstanceNotFound},
			InstanceTypes:      map[types.NodeName]string{"a": "big"},
			Zone:               cloudprovider.Zone{FailureDomain: "z1", Region: "r1"},
		}
		if mutate != nil {
			mutate(c)
		}
		return c
	}
	tests := []struct {
		name        string
		cloud       *fake.Cloud
		node        *corev1.Node
		wantExists  bool
		wantErr     bool
		wantID      string
		metadataErr bool
	}{
		{name: "by name", cloud: v1Cloud(nil), node: node("a"), wantExists: true, wantID: "fake://id-a"},
		{name: "by providerID", cloud: v1Cloud(nil), node: &corev1.Node{ObjectMeta: node("b").ObjectMeta, Spec: corev1.NodeSpec{ProviderID: "fake://id-b"}}, wantExists: true, wantID: "fake://id-b"},
		{name: "unknown name does not exist", cloud: v1Cloud(nil), node: node("nobody"), wantExists: false, metadataErr: true},
		{name: "errors stay errors", cloud: v1Cloud(func(c *fake.Cloud) { c.ErrByProviderID = boom }), node: node("a"), wantErr: true, wantID: "fake://id-a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inst, ok := InstancesV2(tc.cloud)
			if !ok {
				t.Fatal("a provider with Instances (v1) was not adapted")
			}
			exists, err := inst.InstanceExists(context.Background(), tc.node)
			if (err != nil) != tc.wantErr || (err == nil && exists != tc.wantExists) {
				t.Errorf("InstanceExists = %t, %v; want %t (error %t)", exists, err, tc.wantExists, tc.wantErr)
			}
			md, err := inst.InstanceMetadata(context.Background(), tc.node)
			if tc.metadataErr {
				if !errors.Is(err, cloudprovider.InstanceNotFound) {
					t.Errorf("InstanceMetadata err = %v, want InstanceNotFound", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if md.ProviderID != tc.wantID || md.Zone != "z1" || md.Region != "r1" || len(md.NodeAddresses) != 1 {
				t.Errorf("metadata = %+v", md)
			}
		})
	}
}

func TestInstancesV1WithoutInstanceIDsGoesByName(t *testing.T) {
	fc := &fake.Cloud{
		Addresses:     []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.1"}},
		InstanceTypes: map[types.NodeName]string{"a": "big"},
		Zone:          cloudprovider.Zone{FailureDomain: "z1", Region: "r1"},
	}
	inst, ok := InstancesV2(providertest.NameOnly{Cloud: fc})
	if !ok {
		t.Fatal("a provider with Instances (v1) was not adapted")
	}
	if !ProviderIDOptional(inst) {
		t.Error("ProviderIDOptional = false for a v1 provider")
	}
	md, err := inst.InstanceMetadata(context.Background(), node("a"))
	if err != nil {
		t.Fatalf("InstanceMetadata: %v (upstream continues with the node name when InstanceID is NotImplemented)", err)
	}
	if md.ProviderID != "" || md.InstanceType != "big" || md.Zone != "z1" || md.Region != "r1" || len(md.NodeAddresses) != 1 {
		t.Errorf("metadata = %+v, want no provider ID and the by-name answers", md)
	}
	// Shutdown is optional for v1 providers: NotImplemented reads as running.
	shutdown, err := inst.InstanceShutdown(context.Background(), &corev1.Node{ObjectMeta: node("a").ObjectMeta, Spec: corev1.NodeSpec{ProviderID: "fake://a"}})
	if err != nil || shutdown {
		t.Errorf("InstanceShutdown = %t, %v; want false, nil", shutdown, err)
	}
	// Without a provider ID, existence cannot be told: an error, never "gone".
	if _, err := inst.InstanceExists(context.Background(), node("a")); !errors.Is(err, cloudprovider.NotImplemented) {
		t.Errorf("InstanceExists err = %v, want NotImplemented", err)
	}
}

func TestInstancesV2ProviderIDIsRequired(t *testing.T) {
	inst, ok := InstancesV2(&fake.Cloud{EnableInstancesV2: true})
	if !ok {
		t.Fatal("no instances")
	}
	if ProviderIDOptional(inst) {
		t.Error("ProviderIDOptional = true for an InstancesV2 provider")
	}
}

func node(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}
