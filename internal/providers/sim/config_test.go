package sim

import (
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name        string
		config      string
		wantTimeout time.Duration
		wantRetries int
		wantErr     string
	}{
		{name: "minimal", config: "endpoint: http://127.0.0.1:8480", wantTimeout: 10 * time.Second, wantRetries: 2},
		{name: "json", config: `{"endpoint": "https://sim.example", "requestTimeout": "3s", "retries": 0}`, wantTimeout: 3 * time.Second, wantRetries: 0},
		{name: "empty", config: "  \n", wantErr: "cloud-config is empty"},
		{name: "malformed", config: "endpoint: [", wantErr: "malformed cloud-config"},
		{name: "unknown key", config: "endpoint: http://x\nretry: 3", wantErr: `unknown field "retry"`},
		{name: "no scheme", config: "endpoint: 127.0.0.1:8480", wantErr: "must be an http:// or https:// URL"},
		{name: "bad timeout", config: "endpoint: http://x\nrequestTimeout: soon", wantErr: `requestTimeout "soon"`},
		{name: "negative retries", config: "endpoint: http://x\nretries: -1", wantErr: "retries must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, timeout, retries, err := ParseConfig(strings.NewReader(tc.config))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || timeout != tc.wantTimeout || retries != tc.wantRetries {
				t.Errorf("got %s %d %v, want %s %d", timeout, retries, err, tc.wantTimeout, tc.wantRetries)
			}
		})
	}
	if _, _, _, err := ParseConfig(nil); err == nil || !strings.Contains(err.Error(), "needs --cloud-config") {
		t.Errorf("nil config: %v", err)
	}
}
