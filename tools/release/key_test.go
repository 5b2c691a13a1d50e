package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pinnedKey is the project's release public key, committed.
const pinnedKey = "release-key.pub"

// The pinned key's fingerprint is the one README.md, docs/install.md and
// SECURITY.md publish, and what `openssl pkey -pubin -outform DER |
// sha256sum` prints: the SHA-256 of its PKIX form.
func TestPinnedFingerprintPublished(t *testing.T) {
	pub, err := readPublicKey(pinnedKey)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := fingerprint(pub)
	if err != nil {
		t.Fatal(err)
	}
	der, err := readPEM(pinnedKey, "PUBLIC KEY")
	if err != nil {
		t.Fatal(err)
	}
	if fp != sha256Hex(der) || len(fp) != 64 {
		t.Errorf("fingerprint %s, want the SHA-256 of the key's DER, %s", fp, sha256Hex(der))
	}
	for _, doc := range []string{"README.md", "docs/install.md", "SECURITY.md"} {
		b, err := os.ReadFile(filepath.Join(repo, doc))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), fp) {
			t.Errorf("%s does not publish the pinned key's fingerprint %s", doc, fp)
		}
	}
}

// make release signs only with the pinned key's private half: a missing
// key or another key is refused with one line naming the key, before
// anything is built, and no key is made.
func TestReleaseRefusesAKeyNotPinned(t *testing.T) {
	keys := t.TempDir()
	other, otherPub := filepath.Join(keys, "other.pem"), filepath.Join(keys, "other.pub")
	if err := keygen(other, otherPub); err != nil {
		t.Fatal(err)
	}
	third, thirdPub := filepath.Join(keys, "third.pem"), filepath.Join(keys, "third.pub")
	if err := keygen(third, thirdPub); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(keys, "missing.pem")
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"a key not the committed pinned key", []string{"RELEASE_KEY=" + other}, "is not the pinned release key"},
		{"a key not the pinned key RELEASE_PUB names", []string{"RELEASE_KEY=" + other, "RELEASE_PUB=" + thirdPub}, "is not the pinned release key " + thirdPub},
		{"no key", []string{"RELEASE_KEY=" + missing}, "no signing key at " + missing},
		{"no key, with a key pinned", []string{"RELEASE_KEY=" + missing, "RELEASE_PUB=" + otherPub}, "no signing key at " + missing},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "r")
			out, err := runMake(append([]string{"release", "RELEASE_DIR=" + dir, "RELEASE_TAG=0"}, tt.args...)...)
			if err == nil {
				t.Fatalf("make release succeeded, want refused:\n%s", out)
			}
			var lines []string
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				if strings.HasPrefix(l, "release: ") {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 || !strings.Contains(lines[0], tt.want) {
				t.Errorf("make release said\n%s\nwant one line release: ...%s...", out, tt.want)
			}
			if strings.Contains(out, "go build") {
				t.Errorf("make release built before refusing:\n%s", out)
			}
			if _, err := os.Stat(dir); err == nil {
				t.Errorf("make release made %s before refusing", dir)
			}
			if _, err := os.Stat(missing); err == nil {
				t.Errorf("make release made a key at %s", missing)
			}
		})
	}
}

// keygen never writes over an existing private key.
func TestKeygenKeepsAnExistingKey(t *testing.T) {
	dir := t.TempDir()
	key, pub := filepath.Join(dir, "k.pem"), filepath.Join(dir, "k.pub")
	if err := keygen(key, pub); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(key)
	if err := keygen(key, filepath.Join(dir, "k2.pub")); err == nil {
		t.Error("keygen wrote over an existing private key")
	}
	if after, _ := os.ReadFile(key); string(after) != string(before) {
		t.Error("the private key changed")
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("private key mode %v (%v), want 0600", fi.Mode(), err)
	}
}
