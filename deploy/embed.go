// Package deploy holds the manifests users apply (and the real-cluster
// harness applies the same files), embedded so programs can read them.
package deploy

import "embed"

// Manifests are the *.yaml files of this directory.
//
//go:embed *.yaml
var Manifests embed.FS
