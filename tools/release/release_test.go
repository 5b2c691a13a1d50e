package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var repo = filepath.Join("..", "..")

// makeRelease runs make release into dir, signed with key, without tagging
// the repository (TestTag covers that).
func makeRelease(t *testing.T, dir, key string) {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", "-C", repo, "release", "RELEASE_DIR="+dir, "RELEASE_KEY="+key, "RELEASE_TAG=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// A release as make release makes it, twice from the same commit: the same
// bytes both times, verified with the signer's public key, refused with
// another key, and refused when any one byte of any file changes.
func TestReleaseReproducibleAndVerified(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image")
	}
	keys := t.TempDir()
	key := filepath.Join(keys, "release-key.pem")
	first, second := filepath.Join(t.TempDir(), "r"), filepath.Join(t.TempDir(), "r")
	makeRelease(t, first, key)
	makeRelease(t, second, key)

	names := listDir(t, first)
	if !slices.Equal(names, listDir(t, second)) {
		t.Fatalf("two releases of one commit hold %v and %v", names, listDir(t, second))
	}
	for _, n := range names {
		a, _ := os.ReadFile(filepath.Join(first, n))
		b, _ := os.ReadFile(filepath.Join(second, n))
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two releases of one commit (%d and %d bytes)", n, len(a), len(b))
		}
	}

	ctx := context.Background()
	pub := filepath.Join(keys, "release-key.pub")
	v, err := verify(ctx, first, pub)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	var out strings.Builder
	v.print(&out)
	t.Log(out.String())
	if v.Programs != 2 || v.Modules == 0 || len(v.Files) != 5 {
		t.Errorf("verified %+v: want the image's 2 programs, their modules and 5 signed files", v)
	}

	otherKey := filepath.Join(keys, "other.pem")
	if err := keygen(otherKey, filepath.Join(keys, "other.pub")); err != nil {
		t.Fatal(err)
	}
	if _, err := verify(ctx, first, filepath.Join(keys, "other.pub")); err == nil {
		t.Error("a release verified with a key that did not sign it")
	}

	// One changed byte anywhere: refused, naming the file.
	for _, n := range names {
		if n == publicKeyFile {
			continue // not trusted by verify: the user's own copy is
		}
		t.Run(n, func(t *testing.T) {
			dir := t.TempDir()
			for _, m := range names {
				b, _ := os.ReadFile(filepath.Join(first, m))
				if m == n {
					b[len(b)/2] ^= 0x01
				}
				if err := os.WriteFile(filepath.Join(dir, m), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := verify(ctx, dir, pub)
			if err == nil {
				t.Fatalf("a release with one byte of %s changed verified", n)
			}
			t.Logf("refused: %v", err)
		})
	}
}
