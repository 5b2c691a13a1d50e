//go:build tools

// Package tools pins the two programs this module builds, so that `go mod
// tidy` keeps their dependencies and `go build` resolves them from go.mod.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
