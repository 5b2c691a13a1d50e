package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
)

var repo = filepath.Join("..", "..")

// makeRelease runs make release into dir, signed with key and pub pinned,
// without tagging the repository (TestTag covers that).
func makeRelease(t *testing.T, dir, key, pub string) {
	t.Helper()
	out, err := runMake("release", "RELEASE_DIR="+dir, "RELEASE_KEY="+key, "RELEASE_PUB="+pub, "RELEASE_TAG=0")
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
}

func runMake(args ...string) (string, error) {
	cmd := exec.Command("make", append([]string{"--no-print-directory", "-C", repo}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
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
// bytes both times, verified against the key pinned for it (the commit
// printed the one it was built from, the chart and the manifest pulling
// the image by digest), and refused, each time with an error naming what
// is wrong, when any artifact or the key changes (TestTamperedRelease).
func TestReleaseReproducibleAndVerified(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image")
	}
	keys := t.TempDir()
	key, pub := filepath.Join(keys, "release-key.pem"), filepath.Join(keys, "release-key.pub")
	if err := keygen(key, pub); err != nil {
		t.Fatal(err)
	}
	first, second := filepath.Join(t.TempDir(), "r"), filepath.Join(t.TempDir(), "r")
	makeRelease(t, first, key, pub)
	makeRelease(t, second, key, pub)

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

	v, err := verify(context.Background(), first, pub)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	var out strings.Builder
	v.print(&out)
	t.Log(out.String())
	head, err := exec.Command("git", "-C", repo, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	if v.Commit != strings.TrimSpace(string(head)) {
		t.Errorf("verified commit %q, want HEAD %s", v.Commit, head)
	}
	if v.Programs != 2 || v.Modules == 0 || len(v.Files) != 6 {
		t.Errorf("verified %+v: want the image's 2 programs, their modules and 6 signed files", v)
	}
	manifest, _ := os.ReadFile(filepath.Join(first, files{v.Version}.deployment()))
	if !strings.Contains(string(manifest), "image: REGISTRY/outrigger@"+v.ImageDigest+"\n") {
		t.Errorf("the released manifest does not pull the image by digest %s:\n%s", v.ImageDigest, manifest)
	}

	// make release-verify checks against the committed pinned key unless
	// told another: this release, signed by the test's key, is refused by
	// default and verified with RELEASE_PUB.
	pinned, err := readPublicKey(pinnedKey)
	if err != nil {
		t.Fatal(err)
	}
	fp, _ := fingerprint(pinned)
	if out, err := runMake("release-verify", "RELEASE_DIR="+first); err == nil || !strings.Contains(out, "is not the pinned key's ("+fp+")") {
		t.Errorf("make release-verify with the default key: %v\n%s\nwant refused by the pinned key %s", err, out, fp)
	}
	if out, err := runMake("release-verify", "RELEASE_DIR="+first, "RELEASE_PUB="+pub); err != nil || !strings.Contains(out, "verified: Outrigger "+v.Version+", commit "+v.Commit) {
		t.Errorf("make release-verify RELEASE_PUB=%s: %v\n%s", pub, err, out)
	}

	t.Run("tampered", func(t *testing.T) { testTampered(t, first, key, pub, v) })
}

// testTampered changes a verified release one way at a time, each in a
// copy, and checks that verification refuses it with an error naming the
// file or key. "Re-signed" cases forge the outer layers with the pinned key
// itself (SHA256SUMS, and the provenance's subjects when a subject
// changed), so that each inner check is shown to stand on its own.
func testTampered(t *testing.T, good, keyPath, pub string, v *verified) {
	priv, err := readPrivateKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	pinned := ed25519Key{priv: priv, pub: priv.Public().(ed25519.PublicKey)}
	keys := t.TempDir()
	otherPath, otherPub := filepath.Join(keys, "other.pem"), filepath.Join(keys, "other.pub")
	if err := keygen(otherPath, otherPub); err != nil {
		t.Fatal(err)
	}
	otherPriv, err := readPrivateKey(otherPath)
	if err != nil {
		t.Fatal(err)
	}
	other := ed25519Key{priv: otherPriv, pub: otherPriv.Public().(ed25519.PublicKey)}
	f := files{v.Version}
	const anotherDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

	tests := []struct {
		name   string
		tamper func(t *testing.T, dir string)
		pub    string // the pinned key verify is given, when not pub
		want   string // in the error
	}{
		// One changed byte of each file, nothing re-signed.
		{name: "image tarball, one byte", tamper: flipByte(f.image()), want: f.image() + ": SHA-256"},
		{name: "chart, one byte", tamper: flipByte(f.chart()), want: f.chart() + ": SHA-256"},
		{name: "SBOM, one byte", tamper: flipByte(f.sbom()), want: f.sbom() + ": SHA-256"},
		{name: "provenance, one byte", tamper: flipByte(f.provenance()), want: f.provenance() + ": SHA-256"},
		{name: "image signature, one byte", tamper: flipByte(f.imageSig()), want: f.imageSig() + ": SHA-256"},
		{name: "deployment manifest, one byte", tamper: flipByte(f.deployment()), want: f.deployment() + ": SHA-256"},
		{name: "checksums, one byte", tamper: flipByte(sumsFile), want: "SHA256SUMS: its signature (SHA256SUMS.sig) is not the pinned key's"},
		{name: "checksums' signature, one byte", tamper: flipByte(sumsSigFile), want: "SHA256SUMS: its signature (SHA256SUMS.sig) is not the pinned key's"},
		{name: "checksums recomputed after a change, not re-signed", tamper: func(t *testing.T, dir string) {
			flipByte(f.sbom())(t, dir)
			sum(t, dir, f, nil)
		}, want: "SHA256SUMS: its signature (SHA256SUMS.sig) is not the pinned key's"},

		// The key.
		{name: "verified against a different pinned key", tamper: func(*testing.T, string) {}, pub: otherPub, want: "is not the pinned key's"},
		{name: "every signature re-made by a different key pair", tamper: func(t *testing.T, dir string) {
			editEnvelope(t, dir, f.imageSig(), payloadTypeSimpleSigning, other, nil)
			resign(t, dir, f, other, other)
		}, want: "is not the pinned key's"},
		{name: "every signature by a different key pair, verified against that key: well-formed, so only the pin refuses it", tamper: func(t *testing.T, dir string) {
			editEnvelope(t, dir, f.imageSig(), payloadTypeSimpleSigning, other, nil)
			resign(t, dir, f, other, other)
		}, pub: otherPub, want: ""},
		{name: "provenance signed by a different key, checksums re-signed", tamper: func(t *testing.T, dir string) {
			resign(t, dir, f, other, pinned)
		}, want: f.provenance() + ": its signature is not the pinned key's"},
		{name: "image signature by a different key, re-signed", tamper: func(t *testing.T, dir string) {
			editEnvelope(t, dir, f.imageSig(), payloadTypeSimpleSigning, other, nil)
			resign(t, dir, f, pinned, pinned)
		}, want: f.imageSig() + ": its signature is not the pinned key's"},

		// Re-signed with the pinned key: the inner checks.
		{name: "image tarball changed, checksums re-signed", tamper: func(t *testing.T, dir string) {
			flipByte(f.image())(t, dir)
			sum(t, dir, f, &pinned)
		}, want: f.image()},
		{name: "SBOM changed, checksums re-signed: the provenance's subject", tamper: func(t *testing.T, dir string) {
			editFile(t, dir, f.sbom(), func(b []byte) []byte { return append(b, '\n') })
			sum(t, dir, f, &pinned)
		}, want: f.provenance() + ": names " + f.sbom() + " with SHA-256"},
		{name: "SBOM naming another program digest, re-signed", tamper: func(t *testing.T, dir string) {
			editFile(t, dir, f.sbom(), func(b []byte) []byte {
				var bom map[string]any
				if err := json.Unmarshal(b, &bom); err != nil {
					t.Fatal(err)
				}
				for _, c := range bom["components"].([]any) {
					c := c.(map[string]any)
					if strings.HasPrefix(c["bom-ref"].(string), "file:") {
						c["hashes"].([]any)[0].(map[string]any)["content"] = strings.Repeat("0", 64)
					}
				}
				return mustJSON(t, bom)
			})
			resign(t, dir, f, pinned, pinned)
		}, want: f.sbom() + ": program /usr/local/bin/"},
		{name: "SBOM of another image, re-signed", tamper: func(t *testing.T, dir string) {
			editFile(t, dir, f.sbom(), func(b []byte) []byte {
				return bytes.ReplaceAll(b, []byte(strings.TrimPrefix(v.ImageDigest, "sha256:")), []byte(strings.TrimPrefix(anotherDigest, "sha256:")))
			})
			resign(t, dir, f, pinned, pinned)
		}, want: f.sbom() + ": does not describe image"},
		{name: "provenance without its source commit, re-signed", tamper: func(t *testing.T, dir string) {
			editEnvelope(t, dir, f.provenance(), payloadTypeInToto, pinned, func(st map[string]any) {
				delete(st["predicate"].(map[string]any)["buildDefinition"].(map[string]any), "resolvedDependencies")
			})
			resign(t, dir, f, pinned, pinned)
		}, want: f.provenance() + ": source commit []"},
		{name: "provenance with a short source commit, re-signed", tamper: func(t *testing.T, dir string) {
			editEnvelope(t, dir, f.provenance(), payloadTypeInToto, pinned, func(st map[string]any) {
				dep := st["predicate"].(map[string]any)["buildDefinition"].(map[string]any)["resolvedDependencies"].([]any)[0].(map[string]any)
				dep["digest"].(map[string]any)["gitCommit"] = v.Commit[:12]
			})
			resign(t, dir, f, pinned, pinned)
		}, want: f.provenance() + ": source commit"},
		{name: "provenance with another source commit, re-signed", tamper: func(t *testing.T, dir string) {
			editEnvelope(t, dir, f.provenance(), payloadTypeInToto, pinned, func(st map[string]any) {
				dep := st["predicate"].(map[string]any)["buildDefinition"].(map[string]any)["resolvedDependencies"].([]any)[0].(map[string]any)
				dep["digest"].(map[string]any)["gitCommit"] = strings.Repeat("a", 40)
			})
			resign(t, dir, f, pinned, pinned)
		}, want: "names commit " + v.Commit + ", the provenance " + strings.Repeat("a", 40)},
		{name: "provenance naming another image digest, re-signed", tamper: func(t *testing.T, dir string) {
			editEnvelope(t, dir, f.provenance(), payloadTypeInToto, pinned, func(st map[string]any) {
				for _, s := range st["subject"].([]any) {
					s := s.(map[string]any)
					if s["name"] == v.Image+":"+v.Version {
						s["digest"] = map[string]any{"sha256": strings.TrimPrefix(anotherDigest, "sha256:")}
					}
				}
			})
			resign(t, dir, f, pinned, pinned)
		}, want: f.provenance() + ": names image"},
		{name: "provenance without the chart as a subject, re-signed", tamper: func(t *testing.T, dir string) {
			editEnvelope(t, dir, f.provenance(), payloadTypeInToto, pinned, func(st map[string]any) {
				st["subject"] = slices.DeleteFunc(st["subject"].([]any), func(s any) bool { return s.(map[string]any)["name"] == f.chart() })
			})
			resign(t, dir, f, pinned, pinned)
		}, want: f.provenance() + ": names " + f.chart() + ` with SHA-256 ""`},
		{name: "image signature naming another image, re-signed", tamper: func(t *testing.T, dir string) {
			editEnvelope(t, dir, f.imageSig(), payloadTypeSimpleSigning, pinned, func(ss map[string]any) {
				ss["critical"].(map[string]any)["image"].(map[string]any)["docker-manifest-digest"] = anotherDigest
			})
			resign(t, dir, f, pinned, pinned)
		}, want: f.imageSig() + " signs image " + anotherDigest},
		{name: "chart pulling another digest, re-signed", tamper: func(t *testing.T, dir string) {
			editChartValues(t, filepath.Join(dir, f.chart()), func(b []byte) []byte {
				return bytes.Replace(b, []byte(v.ImageDigest), []byte(anotherDigest), 1)
			})
			resign(t, dir, f, pinned, pinned)
		}, want: f.chart() + `: image.digest "` + anotherDigest + `"`},
		{name: "chart pulling by tag, re-signed", tamper: func(t *testing.T, dir string) {
			editChartValues(t, filepath.Join(dir, f.chart()), func(b []byte) []byte {
				return bytes.Replace(b, []byte(`digest: "`+v.ImageDigest+`"`), []byte(`digest: ""`), 1)
			})
			resign(t, dir, f, pinned, pinned)
		}, want: f.chart() + `: image.digest ""`},
		{name: "deployment manifest pulling by tag, re-signed", tamper: func(t *testing.T, dir string) {
			editFile(t, dir, f.deployment(), func(b []byte) []byte {
				return bytes.Replace(b, []byte("REGISTRY/outrigger@"+v.ImageDigest), []byte("REGISTRY/outrigger:"+v.Version), 1)
			})
			resign(t, dir, f, pinned, pinned)
		}, want: f.deployment() + ": does not pull image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, n := range listDir(t, good) {
				b, err := os.ReadFile(filepath.Join(good, n))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			tt.tamper(t, dir)
			p := pub
			if tt.pub != "" {
				p = tt.pub
			}
			_, err := verify(context.Background(), dir, p)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("verify: %v, want verified (a forger's own key pins nothing: the fingerprint is what users compare)", err)
			case tt.want == "":
			case err == nil:
				t.Fatalf("verified, want refused with %q", tt.want)
			case !strings.Contains(err.Error(), tt.want):
				t.Fatalf("refused with %q, want %q in it", err, tt.want)
			default:
				t.Logf("refused: %v", err)
			}
		})
	}
}

// flipByte changes the middle byte of a release's file.
func flipByte(name string) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		editFile(t, dir, name, func(b []byte) []byte {
			b[len(b)/2] ^= 0x01
			return b
		})
	}
}

func editFile(t *testing.T, dir, name string, edit func([]byte) []byte) {
	t.Helper()
	p := filepath.Join(dir, name)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, edit(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// editEnvelope changes a DSSE envelope's JSON payload (edit nil: as it is)
// and signs it again with key.
func editEnvelope(t *testing.T, dir, name, payloadType string, key ed25519Key, edit func(map[string]any)) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	var env dsse.Envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatal(err)
	}
	payload, err := env.DecodeB64Payload()
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		var m map[string]any
		if err := json.Unmarshal(payload, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		payload = mustJSON(t, m)
	}
	if err := writeEnvelope(context.Background(), key, payloadType, payload, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// resign forges the outer layers after a change: the provenance's file
// subjects set to the files' digests and signed by provKey, then
// SHA256SUMS recomputed and signed by sumsKey.
func resign(t *testing.T, dir string, f files, provKey, sumsKey ed25519Key) {
	t.Helper()
	editEnvelope(t, dir, f.provenance(), payloadTypeInToto, provKey, func(st map[string]any) {
		for _, s := range st["subject"].([]any) {
			s := s.(map[string]any)
			if slices.Contains(f.subjects(), s["name"].(string)) {
				sum, err := fileSHA256(filepath.Join(dir, s["name"].(string)))
				if err != nil {
					t.Fatal(err)
				}
				s["digest"] = map[string]any{"sha256": sum}
			}
		}
	})
	sum(t, dir, f, &sumsKey)
}

// sum rewrites SHA256SUMS from the files, and signs it with key when not
// nil.
func sum(t *testing.T, dir string, f files, key *ed25519Key) {
	t.Helper()
	var sums strings.Builder
	for _, name := range f.signed() {
		s, err := fileSHA256(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&sums, "%s  %s\n", s, name)
	}
	if err := os.WriteFile(filepath.Join(dir, sumsFile), []byte(sums.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if key == nil {
		return
	}
	sig := base64.StdEncoding.EncodeToString(ed25519.Sign(key.priv, []byte(sums.String()))) + "\n"
	if err := os.WriteFile(filepath.Join(dir, sumsSigFile), []byte(sig), 0o644); err != nil {
		t.Fatal(err)
	}
}

// editChartValues rewrites a packaged chart with its values.yaml edited.
func editChartValues(t *testing.T, path string, edit func([]byte) []byte) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "outrigger/values.yaml" {
			b = edit(b)
			h.Size = int64(len(b))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
