package provider

import (
	"bytes"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// DecodeConfig reads a cloud-config (YAML or JSON) into v strictly: an
// unknown or misspelt field is an error, never a silent default. It reports
// whether there was a config at all: without one (a nil reader, as when no
// --cloud-config is given, or only blanks) v is left as it is.
func DecodeConfig(r io.Reader, v any) (bool, error) {
	if r == nil {
		return false, nil
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return false, fmt.Errorf("reading cloud-config: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return false, nil
	}
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		return true, fmt.Errorf("malformed cloud-config: %w", err)
	}
	return true, nil
}
