package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	provenance "github.com/in-toto/attestation/go/predicates/provenance/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"google.golang.org/protobuf/encoding/protojson"
)

// verified is what verify checked.
type verified struct {
	Version, Commit, Image, ImageDigest string
	Fingerprint                         string // the pinned key's
	Files                               []string
	Programs                            int
	Modules                             int
}

func (v *verified) print(w io.Writer) {
	fmt.Fprintf(w, "verified: Outrigger %s, commit %s\n", v.Version, v.Commit)
	fmt.Fprintf(w, "  by the pinned key %s\n", v.Fingerprint)
	fmt.Fprintf(w, "  checksums signed by the key: %s\n", strings.Join(v.Files, ", "))
	fmt.Fprintf(w, "  image %s@%s signed by the key\n", v.Image, v.ImageDigest)
	fmt.Fprintf(w, "  provenance (SLSA v1) signed by the key, naming every file, the image digest and the source commit\n")
	fmt.Fprintf(w, "  chart and deployment manifest pull the image by that digest\n")
	fmt.Fprintf(w, "  SBOM (CycloneDX) of the image: %d Go programs, %d modules\n", v.Programs, v.Modules)
}

var sumLine = regexp.MustCompile(`^([0-9a-f]{64})  ([A-Za-z0-9._-]+)$`)

// verify checks a release directory against the pinned public key pubPath:
// the checksums' signature, every file's checksum, the provenance's and the
// image's signatures and what they name (every file, the image digest, the
// source commit, which it returns), the chart's and the manifest's image
// digest, and the SBOM against the image.
func verify(ctx context.Context, dir, pubPath string) (*verified, error) {
	pub, err := readPublicKey(pubPath)
	if err != nil {
		return nil, err
	}
	fp, err := fingerprint(pub)
	if err != nil {
		return nil, err
	}
	sums, err := os.ReadFile(filepath.Join(dir, sumsFile))
	if err != nil {
		return nil, err
	}
	sigText, err := os.ReadFile(filepath.Join(dir, sumsSigFile))
	if err != nil {
		return nil, err
	}
	sig, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(sigText)))
	if err != nil || !ed25519.Verify(pub, sums, sig) {
		return nil, fmt.Errorf("%s: its signature (%s) is not the pinned key's (%s)", sumsFile, sumsSigFile, fp)
	}
	want := map[string]string{}
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(sums))
	for sc.Scan() {
		m := sumLine.FindStringSubmatch(sc.Text())
		if m == nil {
			return nil, fmt.Errorf("%s: malformed line %q", sumsFile, sc.Text())
		}
		want[m[2]] = m[1]
		names = append(names, m[2])
	}
	for _, name := range names {
		got, err := fileSHA256(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		if got != want[name] {
			return nil, fmt.Errorf("%s: SHA-256 %s, %s says %s", name, got, sumsFile, want[name])
		}
	}
	var f files
	for _, n := range names {
		if v, ok := strings.CutPrefix(n, "outrigger-image-v"); ok && strings.HasSuffix(v, ".tar") {
			f.version = strings.TrimSuffix(v, ".tar")
		}
	}
	if f.version == "" || !slices.Equal(names, f.signed()) {
		return nil, fmt.Errorf("%s lists %v, want a release's files %v", sumsFile, names, f.signed())
	}

	img, err := readImage(filepath.Join(dir, f.image()))
	if err != nil {
		return nil, err
	}
	// The image's signature names its manifest digest.
	payload, err := readEnvelope(ctx, pub, filepath.Join(dir, f.imageSig()), payloadTypeSimpleSigning)
	if err != nil {
		return nil, err
	}
	var ss simpleSigning
	if err := json.Unmarshal(payload, &ss); err != nil {
		return nil, fmt.Errorf("%s: %w", f.imageSig(), err)
	}
	if ss.Critical.Image.DockerManifestDigest != img.Digest.String() {
		return nil, fmt.Errorf("%s signs image %s, the tarball holds %s", f.imageSig(), ss.Critical.Image.DockerManifestDigest, img.Digest)
	}

	// The provenance names every file with its digest, and the image.
	payload, err = readEnvelope(ctx, pub, filepath.Join(dir, f.provenance()), payloadTypeInToto)
	if err != nil {
		return nil, err
	}
	var st intoto.Statement
	if err := protojson.Unmarshal(payload, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", f.provenance(), err)
	}
	if err := st.Validate(); err != nil || st.GetPredicateType() != "https://slsa.dev/provenance/v1" {
		return nil, fmt.Errorf("%s: not an in-toto Statement of SLSA v1 provenance (%v)", f.provenance(), err)
	}
	named := map[string]string{}
	for _, s := range st.GetSubject() {
		named[s.GetName()] = s.GetDigest()["sha256"]
	}
	for _, name := range f.subjects() {
		if named[name] != want[name] {
			return nil, fmt.Errorf("%s: names %s with SHA-256 %q, the file's is %s", f.provenance(), name, named[name], want[name])
		}
	}
	image := ss.Critical.Identity.DockerReference + ":" + f.version
	if named[image] != img.Digest.Hex {
		return nil, fmt.Errorf("%s: names image %s with %q, the tarball holds %s", f.provenance(), image, named[image], img.Digest.Hex)
	}
	if len(named) != len(f.subjects())+1 {
		return nil, fmt.Errorf("%s: names %d subjects, want the %d files and the image", f.provenance(), len(named), len(f.subjects()))
	}
	commit, err := sourceCommit(&st)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.provenance(), err)
	}
	if c, ok := ss.Optional["commit"]; ok && c != commit {
		return nil, fmt.Errorf("%s names commit %s, the provenance %s", f.imageSig(), c, commit)
	}
	if err := builtFrom(img, commit); err != nil {
		return nil, err
	}

	// The chart and the manifest pull the image by the digest verified.
	if d, err := chartImageDigest(filepath.Join(dir, f.chart())); err != nil {
		return nil, err
	} else if d != img.Digest.String() {
		return nil, fmt.Errorf("%s: image.digest %q, the image's is %s", f.chart(), d, img.Digest)
	}
	manifest, err := os.ReadFile(filepath.Join(dir, f.deployment()))
	if err != nil {
		return nil, err
	}
	if !regexp.MustCompile(`(?m)^\s+image: ` + regexp.QuoteMeta(manifestImage(img.Digest.String())) + `$`).Match(manifest) {
		return nil, fmt.Errorf("%s: does not pull image %s", f.deployment(), manifestImage(img.Digest.String()))
	}

	// The SBOM describes this image and its programs.
	raw, err := os.ReadFile(filepath.Join(dir, f.sbom()))
	if err != nil {
		return nil, err
	}
	bom, err := readSBOM(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.sbom(), err)
	}
	if bom.Metadata == nil || bom.Metadata.Component == nil || bom.Metadata.Component.Hashes == nil ||
		len(*bom.Metadata.Component.Hashes) == 0 || (*bom.Metadata.Component.Hashes)[0].Value != img.Digest.Hex {
		return nil, fmt.Errorf("%s: does not describe image %s", f.sbom(), img.Digest)
	}
	programs, modules := map[string]string{}, 0
	for _, c := range *bom.Components {
		switch {
		case c.Hashes != nil && strings.HasPrefix(c.BOMRef, "file:"):
			programs[c.Name] = (*c.Hashes)[0].Value
		case strings.HasPrefix(c.BOMRef, "pkg:golang/"):
			modules++
		}
	}
	for _, p := range img.Programs {
		if programs[p.Path] != p.SHA256 {
			return nil, fmt.Errorf("%s: program %s with SHA-256 %q, the image's is %s", f.sbom(), p.Path, programs[p.Path], p.SHA256)
		}
	}
	return &verified{Version: f.version, Commit: commit, Fingerprint: fp, Image: ss.Critical.Identity.DockerReference,
		ImageDigest: img.Digest.String(), Files: names, Programs: len(img.Programs), Modules: modules}, nil
}

func readEnvelope(ctx context.Context, pub ed25519.PublicKey, path, payloadType string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var env dsse.Envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	payload, err := openEnvelope(ctx, pub, &env, payloadType)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return payload, nil
}

// sourceCommit is the commit a provenance names as its source: the
// resolved dependency sourceURI, by its gitCommit digest. A provenance
// without one is refused, so the commit printed is always one the key
// signed.
func sourceCommit(st *intoto.Statement) (string, error) {
	b, err := protojson.Marshal(st.GetPredicate())
	if err != nil {
		return "", err
	}
	var p provenance.Provenance
	if err := protojson.Unmarshal(b, &p); err != nil {
		return "", fmt.Errorf("not SLSA v1 provenance: %w", err)
	}
	var commits []string
	for _, d := range p.GetBuildDefinition().GetResolvedDependencies() {
		if d.GetUri() == sourceURI {
			commits = append(commits, d.GetDigest()["gitCommit"])
		}
	}
	if len(commits) != 1 || !commitPattern.MatchString(commits[0]) {
		return "", fmt.Errorf("source commit %q: want one resolved dependency %s with a gitCommit of 40 hex digits", commits, sourceURI)
	}
	return commits[0], nil
}
