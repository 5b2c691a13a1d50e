package provider

import (
	"errors"
	"fmt"
	"time"

	cloudprovider "k8s.io/cloud-provider"
)

// Reasons a cloud call failed, in the words a Service condition or an Event
// carries. A provider says why with WithReason; Reason knows the rest.
const (
	ReasonQuotaExceeded     = "QuotaExceeded"
	ReasonInvalidAnnotation = "InvalidAnnotation"
	ReasonInvalidSpec       = "InvalidSpec"
	ReasonThrottled         = "Throttled"
	ReasonNotImplemented    = "NotImplemented"
	ReasonCloudError        = "CloudError"
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

// Reason classifies err: a provider's own reason first, then NotImplemented
// and throttling (a retry hint), else CloudError. The call layer adds its
// own reasons (timeouts, calls refused for one still in flight) on top; see
// cloud.Reason.
func Reason(err error) string {
	var re *ReasonError
	switch {
	case errors.As(err, &re):
		return re.Reason
	case errors.Is(err, cloudprovider.NotImplemented):
		return ReasonNotImplemented
	}
	if _, ok := RetryAfter(err); ok {
		return ReasonThrottled
	}
	return ReasonCloudError
}

// RetryAfter reports whether err says the cloud throttled the caller, and
// the cloud's hint for when to try again: any error in the chain with a
// RetryAfter() time.Duration method, as k8s.io/cloud-provider/api.RetryError
// has. A provider returns such an error when its cloud answers "too many
// requests"; Outrigger retries that object after the hint.
func RetryAfter(err error) (time.Duration, bool) {
	var ra interface{ RetryAfter() time.Duration }
	if errors.As(err, &ra) {
		return ra.RetryAfter(), true
	}
	return 0, false
}
