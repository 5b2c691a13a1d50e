//go:build tools

// Package lint pins golangci-lint, which `make lint` builds from source
// (bin/golangci-lint): the version is this module's, not a download's.
package lint

import _ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
