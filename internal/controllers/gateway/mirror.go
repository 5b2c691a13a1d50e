package gateway

import (
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// mirrorOf is a RequestMirror filter with its backendRef resolved (b, as a
// backendRef resolves: the same Service kinds, ReferenceGrants and
// refusal of ExternalName), so that the data plane mirrors only to an
// address the controller chose, never one a request names.
func mirrorOf(b dataplane.Backend, f *gwv1.HTTPRequestMirrorFilter) dataplane.Mirror {
	m := dataplane.Mirror{Address: b.Address, Service: b.Service, H2C: b.H2C}
	m.Numerator, m.Denominator = mirrorShare(f)
	return m
}

// mirrorShare is the share of requests a mirror takes, as numerator and
// denominator: percent out of 100, a fraction (denominator 100 unless
// given), or every request (0, 0: the compact form, also for a share of
// all or more).
func mirrorShare(f *gwv1.HTTPRequestMirrorFilter) (int32, int32) {
	num, den := int32(0), int32(0)
	switch {
	case f.Percent != nil:
		num, den = *f.Percent, 100
	case f.Fraction != nil:
		num, den = f.Fraction.Numerator, 100
		if f.Fraction.Denominator != nil {
			den = *f.Fraction.Denominator
		}
	}
	switch {
	case den <= 0, num >= den:
		// No share, or a share of all: every request. (A denominator
		// below 1 is refused by the API's validation.)
		return 0, 0
	case num < 0:
		return 0, den
	}
	return num, den
}
