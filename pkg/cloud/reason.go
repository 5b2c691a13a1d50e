package cloud

import (
	"errors"
	"fmt"

	cloudprovider "k8s.io/cloud-provider"
)

// Reasons a cloud call failed, in the words a Service condition or an Event
// carries. A provider says why with WithReason; the layer knows the rest.
const (
	ReasonQuotaExceeded     = "QuotaExceeded"
	ReasonInvalidAnnotation = "InvalidAnnotation"
	ReasonInvalidSpec       = "InvalidSpec"
	ReasonThrottled         = "Throttled"
	ReasonTimeout           = "CloudTimeout"
	// ReasonCallInFlight: an earlier call for the object, abandoned after
	// its timeout, still runs; retried with backoff.
	ReasonCallInFlight   = "CallInFlight"
	ReasonNotImplemented = "NotImplemented"
	ReasonCloudError     = "CloudError"
)

// ReasonError is an error a provider has classified.
type ReasonError struct {
	Reason string
	Err    error
}

func (e *ReasonError) Error() string { return e.Err.Error() }
func (e *ReasonError) Unwrap() error { return e.Err }

// WithReason classifies err with reason (one of the Reason constants, or a
// provider's own CamelCase word). A nil err stays nil.
func WithReason(reason string, err error) error {
	if err == nil {
		return nil
	}
	return &ReasonError{Reason: reason, Err: err}
}

// Reasonf is WithReason(reason, fmt.Errorf(format, args...)).
func Reasonf(reason, format string, args ...any) error {
	return WithReason(reason, fmt.Errorf(format, args...))
}

// Reason classifies err: a provider's own reason first, then throttling,
// timeouts, calls refused for one still in flight and NotImplemented, else
// CloudError.
func Reason(err error) string {
	var re *ReasonError
	switch {
	case errors.As(err, &re):
		return re.Reason
	case errors.Is(err, ErrTimeout):
		return ReasonTimeout
	case errors.Is(err, ErrCallInFlight):
		return ReasonCallInFlight
	case errors.Is(err, cloudprovider.NotImplemented):
		return ReasonNotImplemented
	}
	if _, ok := Throttled(err); ok {
		return ReasonThrottled
	}
	return ReasonCloudError
}
