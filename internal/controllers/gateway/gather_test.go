package gateway

import (
	"context"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// countingReader records the Secrets read through it.
type countingReader struct {
	client.Reader
	mu   sync.Mutex
	read []string
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.mu.Lock()
	c.read = append(c.read, key.String())
	c.mu.Unlock()
	return c.Reader.Get(ctx, key, obj, opts...)
}

// A Gateway's certificateRefs are read only where Outrigger may read them
// for it: a Secret of its own namespace, or of another whose
// ReferenceGrant allows it. A ref to another namespace without a grant,
// or to another kind, is never read (the listener says why), so that a
// Gateway cannot make Outrigger read, or probe for, a Secret it was not
// given.
func TestCertificateSecretsReadOnlyWhenGranted(t *testing.T) {
	ctx := context.Background()
	ref := func(ns, name string) gwv1.SecretObjectReference {
		r := gwv1.SecretObjectReference{Name: gwv1.ObjectName(name)}
		if ns != "" {
			r.Namespace = ptr.To(gwv1.Namespace(ns))
		}
		return r
	}
	other := ref("", "not-a-secret")
	other.Kind = ptr.To(gwv1.Kind("ConfigMap"))
	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "edge", Name: "gw", UID: "gw-uid", Generation: 1},
		Spec: gwv1.GatewaySpec{GatewayClassName: "outrigger", Listeners: []gwv1.Listener{{
			Name: "https", Port: 443, Protocol: gwv1.HTTPSProtocolType,
			TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{
				ref("", "own"), ref("vault", "ungranted"), ref("shared", "granted"), other,
			}},
		}}},
	}
	grant := &gwv1.ReferenceGrant{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "edge-certs"},
		Spec: gwv1.ReferenceGrantSpec{
			From: []gwv1.ReferenceGrantFrom{{Group: gwv1.GroupName, Kind: "Gateway", Namespace: "edge"}},
			To:   []gwv1.ReferenceGrantTo{{Group: "", Kind: "Secret"}},
		},
	}
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).
		WithObjects(&gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "outrigger"}, Spec: gwv1.GatewayClassSpec{ControllerName: goldenController}},
			gw, grant).
		WithStatusSubresource(&gwv1.Gateway{}, &corev1.Service{}).
		Build()
	reader := &countingReader{Reader: c}
	r := &reconciler{client: c, reader: reader, own: c, recorder: record.NewFakeRecorder(100), kinds: servedKinds(false, false),
		opts: Options{ControllerName: goldenController, Namespace: DefaultNamespace}}
	r.serving = &dataPlaneServing{r: r}
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(gw)}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(reader.read)
	if want := []string{"edge/own", "shared/granted"}; !slices.Equal(reader.read, want) {
		t.Errorf("Secrets read %v, want only %v", reader.read, want)
	}
}
