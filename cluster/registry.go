package cluster

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// registryHostsDir is where every node's containerd looks up how to reach
// a registry host (containerd's hosts.toml directory layout: one directory
// per host:port).
func (c *Cluster) registryHostsDir() string { return filepath.Join(c.opts.WorkDir, "registry-hosts") }

// ServeRegistry serves an OCI registry (an http.Handler such as
// go-containerregistry's pkg/registry) to the nodes, as a cluster's
// private registry: on BridgeIP in the harness namespace, a port of its
// own, plain HTTP, which every node's containerd is told to use for that
// host. It returns the registry's host:port, the prefix of the image
// references to pull from it. The registry stops with the cluster.
func (c *Cluster) ServeRegistry(h http.Handler) (string, error) {
	ln, err := listenInNetns("/var/run/netns/"+harnessNS, "tcp", net.JoinHostPort(BridgeIP, "0"))
	if err != nil {
		return "", fmt.Errorf("listening for the registry in the harness namespace: %w", err)
	}
	host := ln.Addr().String()
	dir := filepath.Join(c.registryHostsDir(), host)
	hosts := fmt.Sprintf("server = \"http://%s\"\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", host, host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		ln.Close()
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		ln.Close()
		return "", err
	}
	c.mu.Lock()
	c.fwd = append(c.fwd, ln)
	c.mu.Unlock()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return host, nil
}
