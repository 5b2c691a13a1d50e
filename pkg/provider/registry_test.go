package provider

import (
	"errors"
	"io"
	"strings"
	"testing"

	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/fake"
)

func TestRegistry(t *testing.T) {
	reg := NewRegistry()
	reg.Register("b", func(io.Reader) (cloudprovider.Interface, error) { return &fake.Cloud{}, nil })
	reg.Register("a", func(io.Reader) (cloudprovider.Interface, error) { return nil, errors.New("bad config") })
	if got := strings.Join(reg.Names(), ","); got != "a,b" {
		t.Errorf("Names() = %s", got)
	}
	if _, err := reg.New("b", nil); err != nil {
		t.Errorf("New(b): %v", err)
	}
	if _, err := reg.New("a", nil); err == nil || !strings.Contains(err.Error(), `provider "a": bad config`) {
		t.Errorf("New(a) = %v", err)
	}
	if _, err := reg.New("c", nil); err == nil || !strings.Contains(err.Error(), "this binary has providers a, b") {
		t.Errorf("New(c) = %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("registering a name twice did not panic")
		}
	}()
	reg.Register("a", func(io.Reader) (cloudprovider.Interface, error) { return nil, nil })
}
