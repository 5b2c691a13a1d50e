// Package manager is the short path to a provider author's binary: make a
// provider.Registry, register the provider, call Main. See
// docs/provider-guide.md.
//
// It is a front: the command, its flags, leader election and the
// controllers' wiring live in internal/manager, which this package forwards
// to, so that its exported API names only the contract (pkg/provider) and
// cobra, and the wiring can change without breaking a provider's main.
// The Event reasons, the annotation and the feature gate below are
// internal/manager's, named here for those who read or set them.
package manager
