// Package manager is the Outrigger command: flags compatible with the
// upstream cloud-controller-manager, a controller-runtime manager with Lease
// leader election, /healthz, /readyz and /metrics on the secure port, the
// provider built from a registry, and the enabled controllers wired to it
// through the cloud-call layer.
//
// A provider author's binary is a few lines: make a provider.Registry,
// register the provider, call Main. See docs/provider-guide.md.
package manager
