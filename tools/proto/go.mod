// Module proto pins the Go generators of pkg/plugin's code from its .proto,
// protoc-gen-go and protoc-gen-go-grpc (buf comes from package.json beside
// it). Kept apart from the product module.
module github.com/outrigger-ccm/outrigger/tools/proto

go 1.26.0

require (
	google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.5.1
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.31.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20241104194629-dd2ea8efbc28 // indirect
	google.golang.org/grpc v1.68.0 // indirect
)
