//go:build tools

// Package tools pins the Go code generators; `make proto` builds them from
// this module (buf comes from package.json beside it).
package tools

import (
	_ "google.golang.org/grpc/cmd/protoc-gen-go-grpc"
	_ "google.golang.org/protobuf/cmd/protoc-gen-go"
)
