//go:build integration

package gatewayapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/gatewayapi"
	"github.com/outrigger-ccm/outrigger/internal/gatewayapi/served"
	"github.com/outrigger-ccm/outrigger/internal/poll"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The standard channel's HTTPRoute has no rules[].retry, the experimental
// one's has: what the gateway-controller reads before its classes state
// the retry features.
func TestRuleFieldServedFollowsTheChannel(t *testing.T) {
	ctx := context.Background()
	if err := gatewayapi.Install(ctx, testenv.Config); err != nil {
		t.Fatal(err)
	}
	has := func(field string) bool {
		t.Helper()
		ok, err := served.RuleField(ctx, testenv.Config, field)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	// A standard field, to show the document is read at all.
	poll.Until(t, time.Minute, "rules[].timeouts in the standard HTTPRoute's schema", func() bool { return has("timeouts") })
	if has("retry") {
		t.Fatal("the standard channel's HTTPRoute serves rules[].retry")
	}
	if err := gatewayapi.InstallChannel(ctx, testenv.Config, gatewayapi.Experimental); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "rules[].retry in the experimental HTTPRoute's schema", func() bool { return has("retry") })
	if _, err := gatewayapi.ParseChannel("beta"); err == nil {
		t.Fatal(`ParseChannel("beta") took an unknown channel`)
	}
}
