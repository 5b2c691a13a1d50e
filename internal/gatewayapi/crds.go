// Package gatewayapi installs the Gateway API's CRDs (the standard
// channel's, or the experimental one's), read from the
// sigs.k8s.io/gateway-api module this binary was built with (in the Go
// module cache), into a development or test API server, and says which of
// their fields the API server serves.
package gatewayapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

const module = "sigs.k8s.io/gateway-api"

// Channel is a release channel of the Gateway API's CRDs: the
// experimental channel's carry the standard fields and more (an
// HTTPRoute rule's retry, sessionPersistence).
type Channel string

const (
	Standard     Channel = "standard"
	Experimental Channel = "experimental"
)

// ParseChannel checks a channel's name.
func ParseChannel(s string) (Channel, error) {
	switch c := Channel(s); c {
	case Standard, Experimental:
		return c, nil
	}
	return "", fmt.Errorf("unknown Gateway API channel %q: want %s or %s", s, Standard, Experimental)
}

// kinds are the CRDs Outrigger serves or reads, of either channel.
var kinds = []string{"gatewayclasses", "gateways", "httproutes", "grpcroutes", "referencegrants", "tcproutes", "udproutes", "tlsroutes", "backendtlspolicies", "listenersets"}

// Version is the module version this binary links; a test binary, which
// carries no module versions, asks the go command in its module.
func Version(ctx context.Context) (string, error) {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == module {
				if d.Replace != nil {
					return d.Replace.Version, nil
				}
				return d.Version, nil
			}
		}
	}
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", module).Output()
	if err != nil {
		return "", fmt.Errorf("finding the version of %s (go list -m): %w", module, err)
	}
	if v := strings.TrimSpace(string(out)); v != "" {
		return v, nil
	}
	return "", errors.New("go list -m named no version of " + module)
}

// CRDFiles are the channel's CRD manifests of the linked version,
// downloaded into the module cache if they are not there yet.
func CRDFiles(ctx context.Context, channel Channel) ([]string, error) {
	version, err := Version(ctx)
	if err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", module+"@"+version).Output()
	if err != nil {
		return nil, fmt.Errorf("locating %s@%s in the module cache (go mod download): %w", module, version, err)
	}
	var got struct{ Dir, Error string }
	if err := json.Unmarshal(out, &got); err != nil || got.Error != "" {
		return nil, fmt.Errorf("go mod download %s@%s: %v%s", module, version, err, got.Error)
	}
	dir := got.Dir
	if dir == "" {
		return nil, fmt.Errorf("go mod download named no directory for %s@%s", module, version)
	}
	files := make([]string, 0, len(kinds))
	for _, k := range kinds {
		f := filepath.Join(dir, "config", "crd", string(channel), "gateway.networking.k8s.io_"+k+".yaml")
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("%s@%s: %w", module, version, err)
		}
		files = append(files, f)
	}
	return files, nil
}

// Install installs the standard CRDs and waits until they are served.
func Install(ctx context.Context, cfg *rest.Config) error {
	return InstallChannel(ctx, cfg, Standard)
}

// InstallChannel installs (or replaces) the channel's CRDs and waits
// until they are served.
func InstallChannel(ctx context.Context, cfg *rest.Config, channel Channel) error {
	files, err := CRDFiles(ctx, channel)
	if err != nil {
		return err
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: files, MaxTime: time.Minute}); err != nil {
		return fmt.Errorf("installing the Gateway API CRDs (%s channel): %w", channel, err)
	}
	return nil
}
