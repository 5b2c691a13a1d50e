package awsemu

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// AWS serves the AWS APIs over one sim cloud.
type AWS struct {
	cloud *simcloud.Cloud
	// region and zones are the cloud's, fixed at its creation.
	region string
	zones  []string

	// mu guards the state below and makes each ELB and security group call
	// one step: it is taken before the cloud's lock, never inside it.
	mu        sync.Mutex
	secGroups map[string]*SecurityGroup // by ID
	nextSG    int
	nextELB   int
	// metadataInstance is the ID of the instance the metadata service
	// describes: the one its caller runs on.
	metadataInstance string
	imdsTokens       map[string]time.Time // IMDSv2 session token -> expiry
}

// New returns the AWS APIs over cloud, whose VPC has only its default
// security group.
func New(cloud *simcloud.Cloud) *AWS {
	aws := &AWS{
		cloud:      cloud,
		region:     cloud.Region(),
		zones:      cloud.Zones(),
		secGroups:  map[string]*SecurityGroup{},
		imdsTokens: map[string]time.Time{},
	}
	aws.addDefaultSecurityGroup()
	return aws
}

// Handler serves the AWS APIs at their paths (EC2Path, ELBPath, and the
// metadata service's /latest/, where the AWS SDKs hard-code it) and the sim
// cloud's own API at every other.
func (aws *AWS) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(EC2Path, aws.ec2Handler)
	// The SDKs join the endpoint's path and "/" as "/ec2": a redirect to
	// "/ec2/" would not be followed for a POST.
	mux.HandleFunc(strings.TrimSuffix(EC2Path, "/"), aws.ec2Handler)
	mux.HandleFunc(ELBPath, aws.elbHandler)
	mux.HandleFunc(strings.TrimSuffix(ELBPath, "/"), aws.elbHandler)
	mux.HandleFunc("/latest/", aws.imdsHandler)
	mux.Handle("/", aws.cloud.Handler())
	return mux
}

// Serve listens on addr ("127.0.0.1:0" picks a port) and serves Handler
// until ctx ends. It returns the base URL once listening.
func (aws *AWS) Serve(ctx context.Context, addr string) (string, error) {
	return simcloud.ListenAndServe(ctx, addr, aws.Handler())
}
