package main

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// image is what a release's image tarball (an OCI layout, make image)
// holds: the manifest digest a registry and containerd name it by, and its
// Go programs.
type image struct {
	Digest   v1.Hash
	Programs []program
}

// program is a Go binary of the image and its build information.
type program struct {
	Path   string // in the image
	SHA256 string
	Info   *buildinfo.BuildInfo
}

// readImage opens an OCI layout tarball of one image.
func readImage(path string) (*image, error) {
	dir, err := os.MkdirTemp("", "release-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := untar(path, dir); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: not an OCI image layout: %w", path, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("%s: %d images, want 1", path, len(m.Manifests))
	}
	digest := m.Manifests[0].Digest
	img, err := idx.Image(digest)
	if err != nil {
		return nil, err
	}
	// Reading every blob checks each against its digest.
	if _, err := img.ConfigFile(); err != nil {
		return nil, fmt.Errorf("%s: config: %w", path, err)
	}
	out := &image{Digest: digest}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: reading its files: %w", path, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		info, err := buildinfo.Read(bytes.NewReader(b))
		if err != nil {
			continue // not a Go program
		}
		out.Programs = append(out.Programs, program{Path: "/" + strings.TrimPrefix(h.Name, "/"), SHA256: sha256Hex(b), Info: info})
	}
	sort.Slice(out.Programs, func(i, j int) bool { return out.Programs[i].Path < out.Programs[j].Path })
	if len(out.Programs) == 0 {
		return nil, fmt.Errorf("%s: no Go program in the image", path)
	}
	return out, nil
}

func untar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || strings.HasPrefix(name, "..") {
			return fmt.Errorf("entry %q outside the layout", h.Name)
		}
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			w, err := os.Create(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, tr)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}
