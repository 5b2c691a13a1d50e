package dev

import (
	"context"
	"errors"
	"testing"

	"github.com/outrigger-ccm/outrigger/internal/console"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

func TestSimActions(t *testing.T) {
	cloud := simcloud.New("")
	if _, err := cloud.Create(simcloud.CreateRequest{Name: "node-1"}); err != nil {
		t.Fatal(err)
	}
	a := SimActions{Cloud: cloud}
	cases := []struct {
		name, target string
		wantErr      error
		check        func() bool
	}{
		{"stop", "node-1", nil, func() bool { in, _ := cloud.Get("node-1"); return in.State == simcloud.StateStopped }},
		{"start", "node-1", nil, func() bool { in, _ := cloud.Get("node-1"); return in.State == simcloud.StateRunning }},
		{"throttle", "", nil, func() bool { return cloud.Settings().RateLimit == 2 }},
		{"errors", "", nil, func() bool { s := cloud.Settings(); return s.ErrorRate == 0.5 && s.RateLimit == 2 }},
		{"clear-faults", "", nil, func() bool { s := cloud.Settings(); return s.ErrorRate == 0 && s.RateLimit == 0 }},
		{"terminate", "node-1", nil, func() bool { in, _ := cloud.Get("node-1"); return in.State == simcloud.StateTerminated }},
		{"start", "node-1", nil, nil}, // a terminated instance never runs again
		{"stop", "node-9", nil, nil},
		{"explode", "", console.ErrUnknownAction, nil},
	}
	for _, tc := range cases {
		msg, err := a.Do(context.Background(), tc.name, tc.target)
		switch {
		case tc.check == nil && err == nil:
			t.Errorf("%s %s: no error (%s)", tc.name, tc.target, msg)
		case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
			t.Errorf("%s: %v, want %v", tc.name, err, tc.wantErr)
		case tc.check != nil && (err != nil || !tc.check()):
			t.Errorf("%s %s: %v, %q; the cloud did not change", tc.name, tc.target, err, msg)
		}
	}
	for _, act := range a.List() {
		if act.Name == "" || act.Label == "" {
			t.Errorf("action without a name or label: %+v", act)
		}
	}
}
