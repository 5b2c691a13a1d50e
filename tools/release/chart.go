package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// chartImageDigest is the image.digest of a packaged chart's values.yaml
// (package-chart -image-digest writes it): the digest the chart's image
// is pulled by. Empty when the chart names its image by tag only.
func chartImageDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("%s: no values.yaml", path)
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if h.Name != "outrigger/values.yaml" {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		d, err := valuesImageDigest(b)
		if err != nil {
			return "", fmt.Errorf("%s: values.yaml: %w", path, err)
		}
		return d, nil
	}
}

// valuesImageDigest reads image.digest from the chart's values.yaml as the
// chart writes it: a top-level image block, its keys indented two spaces,
// one scalar per line.
func valuesImageDigest(values []byte) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(values))
	in := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "image:":
			in = true
		case in && line != "" && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "#"):
			return "", nil
		case in:
			v, ok := strings.CutPrefix(line, "  digest:")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			if u, err := strconv.Unquote(v); err == nil {
				v = u
			}
			return v, nil
		}
	}
	return "", sc.Err()
}
