//go:build integration

package service_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outrigger-ccm/outrigger/internal/controllers/service"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// The cleanup finalizer is written from the object a reconcile read, which
// may be stale: another writer's finalizer added since is kept, a Service
// created since under the same name is left alone, and the write is
// upstream's (the status subresource, as in managedFields).
func TestFinalizerWritesFromAStaleRead(t *testing.T) {
	c, err := client.New(testenv.Config, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	const other = "example.com/other"
	for _, tc := range []struct {
		name string
		// start are the Service's finalizers when the reconcile reads it.
		start []string
		// meanwhile changes the Service after the read (in namespace ns).
		meanwhile func(t *testing.T, ns string, read *corev1.Service)
		write     func(*corev1.Service) error
		wantErr   bool
		want      []string
	}{
		{name: "added beside a finalizer written since", start: nil,
			meanwhile: func(t *testing.T, ns string, _ *corev1.Service) { setFinalizers(t, ns, "s", other) },
			write:     func(s *corev1.Service) error { return service.AddFinalizer(ctx, c, s) },
			want:      []string{other, service.Finalizer}},
		{name: "removed, keeping a finalizer written since", start: []string{service.Finalizer},
			meanwhile: func(t *testing.T, ns string, _ *corev1.Service) { setFinalizers(t, ns, "s", service.Finalizer, other) },
			write:     func(s *corev1.Service) error { return service.RemoveFinalizer(ctx, c, s) },
			want:      []string{other}},
		{name: "not removed from a Service created since under the same name", start: []string{service.Finalizer},
			meanwhile: func(t *testing.T, ns string, read *corev1.Service) {
				setFinalizers(t, ns, "s")
				if err := testenv.Client.CoreV1().Services(ns).Delete(ctx, "s", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				createService(t, ns, service.Finalizer)
				if get(t, ns, "s").UID == read.UID {
					t.Fatal("the Service was not created again")
				}
			},
			write:   func(s *corev1.Service) error { return service.RemoveFinalizer(ctx, c, s) },
			wantErr: true,
			want:    []string{service.Finalizer}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := testenv.Name("fin")
			createNamespace(t, ns)
			createService(t, ns, tc.start...)
			read := get(t, ns, "s")
			tc.meanwhile(t, ns, read)
			err := tc.write(read)
			if (err != nil) != tc.wantErr {
				t.Fatalf("write: err = %v, want an error: %t", err, tc.wantErr)
			}
			got := get(t, ns, "s")
			defer setFinalizers(t, ns, "s") // let the namespace's cleanup delete it
			if !sameSet(got.Finalizers, tc.want) {
				t.Errorf("finalizers = %v, want %v", got.Finalizers, tc.want)
			}
			if tc.wantErr {
				t.Logf("refused as it should be: %v", err)
				return
			}
			if !sameSet(read.Finalizers, tc.want) {
				t.Errorf("the object written holds finalizers %v, want %v", read.Finalizers, tc.want)
			}
			if len(tc.want) == 1 && tc.want[0] == other {
				return // nothing of ours is left in managedFields
			}
			var viaStatus bool
			for _, f := range got.ManagedFields {
				viaStatus = viaStatus || f.Subresource == "status"
			}
			if !viaStatus {
				t.Errorf("no managedFields entry of the status subresource: %+v", got.ManagedFields)
			}
		})
	}
}

func createService(t *testing.T, ns string, finalizers ...string) {
	t.Helper()
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Finalizers: finalizers},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if _, err := testenv.Client.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func setFinalizers(t *testing.T, ns, name string, finalizers ...string) {
	t.Helper()
	s := get(t, ns, name)
	s.Finalizers = finalizers
	if _, err := testenv.Client.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func sameSet(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(s string) bool { return !slices.Contains(b, s) })
}
