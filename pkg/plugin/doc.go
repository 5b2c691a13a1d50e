// Package plugin is Outrigger's out-of-process provider protocol: a cloud
// provider served as its own process, in any language, over gRPC
// (proto/outrigger/plugin/v1/plugin.proto; generated Go in pluginpb).
//
// Serve (and Main) make any cloudprovider.Interface a plugin. NewProvider
// is the other side: a cloudprovider.Interface whose calls go to a plugin,
// registered as the provider "grpc", so Outrigger's controllers never know
// whether the cloud is in-process or not.
package plugin
