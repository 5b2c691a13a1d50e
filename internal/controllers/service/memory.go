package service

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// applied is what the controller last made the cloud do for one Service.
type applied struct {
	service *corev1.Service // a copy, to delete the LB if the Service vanishes unseen
	spec    string
	nodes   backendSet
	status  corev1.LoadBalancerStatus
	// elsewhere: the provider answered cloudprovider.ImplementedElsewhere,
	// so another component makes this load balancer and owns the status.
	elsewhere bool
}

// memory is what this process remembers of the Services it provisioned:
// what it last applied to each, which it may have to clean up without
// seeing it again, and which Services of another class it has found to
// hold no load balancer of its own. It is lost on restart; everything in
// it can be learnt again from the cluster and the cloud, at the price of
// a full EnsureLoadBalancer per Service.
type memory struct {
	mu      sync.Mutex
	applied map[types.NamespacedName]applied
	// notOurs holds the UIDs of Services of another class found to have
	// no load balancer of ours: their class can only become ours again
	// by a change that makes owns() true, so the cloud is asked once.
	notOurs map[types.UID]bool
}

func newMemory() *memory {
	return &memory{applied: map[types.NamespacedName]applied{}, notOurs: map[types.UID]bool{}}
}

func (m *memory) last(key types.NamespacedName) (applied, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.applied[key]
	return a, ok
}

func (m *memory) remember(key types.NamespacedName, a applied) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applied[key] = a
}

func (m *memory) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.applied, key)
}

// keys lists the Services the controller provisioned: those a node change
// may concern.
func (m *memory) keys() []types.NamespacedName {
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := make([]types.NamespacedName, 0, len(m.applied))
	for k := range m.applied {
		keys = append(keys, k)
	}
	return keys
}

// notOursFound forgets key and records that the Service object uid, of
// another class, holds no load balancer of ours.
func (m *memory) notOursFound(key types.NamespacedName, uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.applied, key)
	m.notOurs[uid] = true
}

// checkedNotOurs reports whether the Service object uid was found to hold
// no load balancer of ours.
func (m *memory) checkedNotOurs(uid types.UID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.notOurs[uid]
}
