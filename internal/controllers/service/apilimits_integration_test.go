//go:build integration

package service_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/service"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// A provider answering an ingress point the API refuses (a hostname one
// past the 253 characters of a DNS name) gets the others written, and an
// Event names the field and the limit; the whole status write failing
// instead would leave the Service with no address, retried for ever.
func TestIngressTheAPIRefusesIsLeftOut(t *testing.T) {
	lb := newFakeLB()
	name := testenv.Name("too-long")
	long := strings.Repeat(strings.Repeat("a", 62)+".", 5)[:253] + "b" // 254 characters
	lb.ensure[name] = func() (*corev1.LoadBalancerStatus, error) {
		return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.18.7.2"}, {Hostname: long}}}, nil
	}
	ns := testenv.Name("lb")
	startController(t, lb, ns)
	createNamespace(t, ns)
	node(t, "198.18.8.4", nil)

	create(t, lbService(ns, name, 80))
	testenv.Eventually(t, 20*time.Second, "an ingress", func() (bool, error) {
		return len(get(t, ns, name).Status.LoadBalancer.Ingress) > 0, nil
	})
	if ing := get(t, ns, name).Status.LoadBalancer.Ingress; len(ing) != 1 || ing[0].IP != "198.18.7.2" {
		t.Errorf("ingress = %v, want the IP alone", ing)
	}
	waitEvents(t, name, service.EventAnswerRefused)
	msg := testenv.Events(t, name)[service.EventAnswerRefused][0].Message
	if !strings.Contains(msg, "status.loadBalancer.ingress[1].hostname") || !strings.Contains(msg, "at most 253 characters") {
		t.Errorf("Event %q does not name the field and the limit", msg)
	}
}
