package cloud

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/fake"
)

func TestInstancesV1ProviderIsAdapted(t *testing.T) {
	boom := errors.New("boom")
	v1Cloud := func(mutate func(*fake.Cloud)) *fake.Cloud {
		c := &fake.Cloud{
			ExistsByProviderID: true,
			Addresses:          []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.1.1.1"}},
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
			inst, ok := New(tc.cloud, Options{}).Instances()
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
