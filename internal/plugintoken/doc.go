// Package plugintoken gives a provider plugin run beside Outrigger (a
// sidecar container, docs/plugins.md) Kubernetes API access as a
// ServiceAccount of its own, instead of the pod's: Outrigger's own account
// holds rights no provider's code should inherit (the gateway-controller's
// `get` on Secrets cluster-wide). Outrigger asks the TokenRequest API for
// the plugin's token and writes it, with the API server's CA and the
// namespace, into a directory the plugin mounts where the kubelet would
// mount a ServiceAccount's (--plugin-service-account,
// --plugin-api-access-dir), replacing the token at 80 % of its lifetime.
// Upstream's CCM has no such thing: its providers run in its process.
//
// The decision (when the next token is asked for) is nextRequest, pure; the
// Writer acts on it.
package plugintoken
