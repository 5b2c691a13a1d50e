// Package manager is the Outrigger command behind pkg/manager's Main: flags
// compatible with the upstream cloud-controller-manager, a
// controller-runtime manager with Lease leader election, /healthz, /readyz
// and /metrics on the secure port, the provider built from a registry, and
// the enabled controllers wired to it through the cloud-call layer.
//
// Each controller describes itself (internal/controllers/descriptor); the
// one list of them, in start order, is controllers.go's: the --controllers
// names and aliases, the ServiceAccounts, the reasons a controller does not
// start and its setup all come from it. Package app (a provider's
// upstream-shaped main), `outrigger dev`, the tests and the benchmarks build
// on New and Options; a provider's own binary goes through pkg/manager,
// whose API names no internal package.
package manager
