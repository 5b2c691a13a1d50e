package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// imageConfig unpacks the tarball build wrote and returns its one image's
// config.
func imageConfig(t *testing.T, tarball string) *v1.ConfigFile {
	t.Helper()
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("index has %d manifests, want 1", len(m.Manifests))
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return cf
}

func TestBuildEntrypointAndCmd(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "agnhost")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		entrypoint []string
		cmd        []string
		wantEntry  []string
	}{
		// A pod that gives no args runs the image's CMD: the e2e suite's
		// exec pods are agnhost pods without args that must keep running.
		{name: "cmd", cmd: []string{"pause"}, wantEntry: []string{"/agnhost"}},
		{name: "no cmd", wantEntry: []string{"/agnhost"}},
		{name: "entrypoint given", entrypoint: []string{"/agnhost", "serve-hostname"}, wantEntry: []string{"/agnhost", "serve-hostname"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "img.tar")
			if err := build(pairs{{bin, "/agnhost"}}, nil, "", "outrigger.local/e2e-test-images/agnhost:2.66.1", out, tc.entrypoint, tc.cmd); err != nil {
				t.Fatal(err)
			}
			cf := imageConfig(t, out)
			if !slices.Equal(cf.Config.Entrypoint, tc.wantEntry) {
				t.Errorf("Entrypoint = %q, want %q", cf.Config.Entrypoint, tc.wantEntry)
			}
			if !slices.Equal(cf.Config.Cmd, tc.cmd) {
				t.Errorf("Cmd = %q, want %q", cf.Config.Cmd, tc.cmd)
			}
		})
	}
}

func TestLddPaths(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      []string
		wantErr   bool
	}{
		{"libraries and loader", "\tlinux-vdso.so.1 (0x00007ff66098a000)\n\tlibbsd.so.0 => /lib/x86_64-linux-gnu/libbsd.so.0 (0x00007ff6608d8000)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007ff66098c000)\n",
			[]string{"/lib/x86_64-linux-gnu/libbsd.so.0", "/lib64/ld-linux-x86-64.so.2"}, false},
		{"static program", "\tnot a dynamic executable\n", nil, false},
		{"library not found", "\tlibgone.so.1 => not found\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := lddPaths(tc.out)
			if (err != nil) != tc.wantErr {
				t.Fatalf("lddPaths error = %v, want error %v", err, tc.wantErr)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("lddPaths = %q, want %q", got, tc.want)
			}
		})
	}
}

// A static program goes in alone; a dynamic one brings its loader.
func TestAddHostBinaries(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	static := filepath.Join(dir, "static")
	build := exec.Command("go", "build", "-o", static, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building a static program: %v\n%s", err, out)
	}
	files, err := addHostBinaries(nil, pairs{{static, "/static"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := (pairs{{static, "/static"}}); !slices.Equal(files, want) {
		t.Errorf("static program: files = %q, want %q", files, want)
	}

	files, err = addHostBinaries(nil, pairs{{"/bin/sh", "/bin/sh"}})
	if err != nil {
		t.Fatal(err)
	}
	loader := false
	for _, f := range files[1:] {
		loader = loader || strings.Contains(f[0], "ld-linux")
	}
	if files[0] != [2]string{"/bin/sh", "/bin/sh"} || !loader {
		t.Errorf("dynamic program: files = %q, want /bin/sh and its loader", files)
	}
}
