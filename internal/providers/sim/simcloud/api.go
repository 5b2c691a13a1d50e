// The API types and client live in package simapi, which the sim provider
// imports without this server; they are named here too, for the server
// and its tests.

package simcloud

import "github.com/outrigger-ccm/outrigger/internal/providers/sim/simapi"

// callLogSize bounds the call log: a long `outrigger dev` session keeps the
// newest calls.
const callLogSize = 100_000

type (
	APIError         = simapi.APIError
	Address          = simapi.Address
	Backend          = simapi.Backend
	BatchGetRequest  = simapi.BatchGetRequest
	BatchGetResponse = simapi.BatchGetResponse
	Calls            = simapi.Calls
	Client           = simapi.Client
	CreateRequest    = simapi.CreateRequest
	Duration         = simapi.Duration
	Error            = simapi.Error
	Instance         = simapi.Instance
	Listener         = simapi.Listener
	LoadBalancer     = simapi.LoadBalancer
	LoadBalancerSpec = simapi.LoadBalancerSpec
	LoggedCall       = simapi.LoggedCall
	Route            = simapi.Route
	Settings         = simapi.Settings
	ThrottledError   = simapi.ThrottledError
)

const (
	AdminHeader              = simapi.AdminHeader
	CallerHeader             = simapi.CallerHeader
	CodeInstanceNotFound     = simapi.CodeInstanceNotFound
	CodeLoadBalancerNotFound = simapi.CodeLoadBalancerNotFound
	CodeTagsMismatch         = simapi.CodeTagsMismatch
	IfTagsHeader             = simapi.IfTagsHeader
	StateRunning             = simapi.StateRunning
	StateStopped             = simapi.StateStopped
	StateTerminated          = simapi.StateTerminated
)

var (
	APIErrorCode = simapi.APIErrorCode
	IsCode       = simapi.IsCode
	IsConflict   = simapi.IsConflict
	NewClient    = simapi.NewClient
)
