package provider

import (
	"strings"
	"testing"
)

func TestDecodeConfig(t *testing.T) {
	type cfg struct {
		Endpoint string `json:"endpoint"`
	}
	tests := []struct {
		name, in    string
		nilReader   bool
		wantPresent bool
		wantErr     string
		want        string
	}{
		{name: "no --cloud-config", nilReader: true},
		{name: "blank", in: " \n\t"},
		{name: "yaml", in: "endpoint: http://127.0.0.1:1\n", wantPresent: true, want: "http://127.0.0.1:1"},
		{name: "json", in: `{"endpoint": "http://127.0.0.1:2"}`, wantPresent: true, want: "http://127.0.0.1:2"},
		{name: "misspelt field", in: "endpiont: x\n", wantPresent: true, wantErr: `malformed cloud-config: error unmarshaling JSON: while decoding JSON: json: unknown field "endpiont"`},
		{name: "not yaml", in: "endpoint: [\n", wantPresent: true, wantErr: "malformed cloud-config"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c cfg
			var present bool
			var err error
			if tc.nilReader {
				present, err = DecodeConfig(nil, &c)
			} else {
				present, err = DecodeConfig(strings.NewReader(tc.in), &c)
			}
			if present != tc.wantPresent || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("DecodeConfig = %v, %v; want %v, %q", present, err, tc.wantPresent, tc.wantErr)
			}
			if c.Endpoint != tc.want {
				t.Errorf("endpoint %q, want %q", c.Endpoint, tc.want)
			}
		})
	}
}
