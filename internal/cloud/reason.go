package cloud

import (
	"errors"

	"github.com/outrigger-ccm/outrigger/internal/cloud/internal/admission"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// Reasons the call layer itself gives a failed call, in the words a Service
// condition or an Event carries; a provider's own are in package provider.
const (
	// ReasonTimeout: the call was abandoned at --cloud-call-timeout, or
	// held back because its object's last calls were.
	ReasonTimeout = "CloudTimeout"
	// ReasonCallInFlight: a call for the object still runs, past its
	// method's usual answers or abandoned at its timeout; retried with
	// backoff.
	ReasonCallInFlight = "CallInFlight"
)

// Reason classifies the error of a call made through the layer: a
// provider's own reason first (provider.WithReason), then timeouts and calls
// refused for one still in flight, then provider.Reason's classification
// (NotImplemented, Throttled, CloudError).
func Reason(err error) string {
	var re *provider.ReasonError
	switch {
	case errors.As(err, &re):
		return re.Reason
	case errors.Is(err, ErrTimeout), errors.Is(err, admission.ErrTimedOutBefore):
		return ReasonTimeout
	case errors.Is(err, ErrCallInFlight), errors.Is(err, ErrStillRunning):
		return ReasonCallInFlight
	}
	return provider.Reason(err)
}
