//go:build tools

// Package tools pins the programs this module builds, so that `go mod tidy`
// keeps their dependencies and `go build` resolves them from go.mod: the
// control plane of `outrigger dev` and the integration tests (etcd,
// kube-apiserver, kubectl), and the rest of a real cluster for cluster/
// (kubelet, kube-proxy, kube-controller-manager, kube-scheduler, agnhost).
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/test/images/agnhost"
)
