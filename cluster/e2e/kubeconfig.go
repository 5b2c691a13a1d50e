package e2e

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
)

// RewriteKubeconfig writes to dst the kubeconfig at src (the cluster's
// admin one, for the host's loopback) with every cluster's server set to
// https://addr and no tls-server-name. The suite runs in the harness
// namespace and reaches the API server at the bridge address, which the
// serving certificate names: it cannot rely on tls-server-name, which the
// e2e framework loses (it re-applies the server as an override, and
// client-go clears tls-server-name when the server is overridden).
func RewriteKubeconfig(src, dst, addr string) error {
	cfg, err := clientcmd.LoadFromFile(src)
	if err != nil {
		return fmt.Errorf("reading kubeconfig %s: %w", src, err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + addr
		c.TLSServerName = ""
	}
	if err := clientcmd.WriteToFile(*cfg, dst); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", dst, err)
	}
	return nil
}
