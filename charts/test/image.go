package charttest

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// LoadImage reads an image tarball as docs/install.md has users push it:
// unpacked into dir (tar -xf), an OCI image layout holding one image
// (crane push DIR). It returns the image and its descriptor in the
// layout's index (annotations: the ref name, containerd's image name).
func LoadImage(tarball, dir string) (v1.Image, v1.Descriptor, error) {
	if err := untar(tarball, dir); err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("%s: %w", tarball, err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("%s is not an OCI image layout: %w", tarball, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	if len(im.Manifests) != 1 {
		return nil, v1.Descriptor{}, fmt.Errorf("%s holds %d manifests, want 1", tarball, len(im.Manifests))
	}
	desc := im.Manifests[0]
	img, err := idx.Image(desc.Digest)
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	return img, desc, nil
}

// untar unpacks a tarball of regular files and directories into dir, as
// tar -xf does.
func untar(file, dir string) error {
	f, err := os.Open(file)
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
		if !filepath.IsLocal(h.Name) {
			return fmt.Errorf("entry %q leaves the directory", h.Name)
		}
		p := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			err = writeFile(p, tr)
		default:
			err = fmt.Errorf("entry %q of type %q", h.Name, h.Typeflag)
		}
		if err != nil {
			return err
		}
	}
}

func writeFile(p string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
