package main

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	provenance "github.com/in-toto/attestation/go/predicates/provenance/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const (
	// payloadTypeInToto is DSSE's payload type for an in-toto Statement.
	payloadTypeInToto = "application/vnd.in-toto+json"
	// payloadTypeSimpleSigning is the payload type of a container image
	// signature in the simple-signing form.
	payloadTypeSimpleSigning = "application/vnd.dev.cosign.simplesigning.v1+json"
	// buildType names how make release builds, for the provenance.
	buildType = "https://github.com/outrigger-ccm/outrigger/blob/main/docs/install.md#verifying-a-release"
	// sumsFile, sumsSigFile and publicKeyFile are written by attest.
	sumsFile      = "SHA256SUMS"
	sumsSigFile   = "SHA256SUMS.sig"
	publicKeyFile = "outrigger-release.pub"
	// sourceURI names the repository a release is built from, the
	// provenance's source; its gitCommit digest is the release's commit.
	sourceURI = "git+https://github.com/outrigger-ccm/outrigger"
	// imagePlaceholder is deploy/deployment.yaml's image, which the
	// released manifest names by digest.
	imagePlaceholder = "REGISTRY/outrigger:VERSION"
)

// commitPattern is a full git commit name (SHA-1).
var commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// files names a release's files by version.
type files struct{ version string }

func (f files) image() string      { return "outrigger-image-v" + f.version + ".tar" }
func (f files) chart() string      { return "outrigger-" + f.version + ".tgz" }
func (f files) sbom() string       { return "outrigger-v" + f.version + ".cdx.json" }
func (f files) provenance() string { return "outrigger-v" + f.version + ".provenance.dsse.json" }
func (f files) imageSig() string   { return "outrigger-image-v" + f.version + ".sig.dsse.json" }
func (f files) deployment() string { return "outrigger-v" + f.version + ".deployment.yaml" }

// subjects lists what the provenance names by digest, beside the image.
func (f files) subjects() []string {
	return []string{f.image(), f.chart(), f.sbom(), f.imageSig(), f.deployment()}
}

// signed lists what SHA256SUMS covers, in its order.
func (f files) signed() []string {
	s := append(f.subjects(), f.provenance())
	sort.Strings(s)
	return s
}

// attestOptions are attest's inputs.
type attestOptions struct {
	Dir     string // the image tarball and the packaged chart, and where the rest is written
	Key     string // the private key (PEM)
	Pub     string // the pinned public key: Key's public half, or attest refuses
	Deploy  string // deploy/deployment.yaml, written beside with the image by digest
	Version string
	Commit  string // the full commit name, signed in the provenance
	Image   string // the image's reference, repository:version
	// SourceDateEpoch is the commit's time: every timestamp written.
	SourceDateEpoch int64
}

// simpleSigning is a container image signature's payload: the manifest
// digest signed for the image's name.
type simpleSigning struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional map[string]string `json:"optional"`
}

func attest(ctx context.Context, o attestOptions) error {
	priv, err := checkPinned(o.Key, o.Pub)
	if err != nil {
		return err
	}
	if !commitPattern.MatchString(o.Commit) {
		return fmt.Errorf("commit %q: want a full commit name (40 hex digits)", o.Commit)
	}
	key := ed25519Key{priv: priv, pub: priv.Public().(ed25519.PublicKey)}
	f := files{o.Version}
	created := time.Unix(o.SourceDateEpoch, 0).UTC()
	img, err := readImage(filepath.Join(o.Dir, f.image()))
	if err != nil {
		return err
	}
	if err := builtFrom(img, o.Commit); err != nil {
		return err
	}
	if got, err := chartImageDigest(filepath.Join(o.Dir, f.chart())); err != nil {
		return err
	} else if got != img.Digest.String() {
		return fmt.Errorf("%s: image.digest %q, the image's is %s (package-chart -image-digest)", f.chart(), got, img.Digest)
	}
	manifest, err := os.ReadFile(o.Deploy)
	if err != nil {
		return err
	}
	if n := strings.Count(string(manifest), imagePlaceholder); n != 1 {
		return fmt.Errorf("%s: %d images %s, want 1", o.Deploy, n, imagePlaceholder)
	}
	manifest = []byte(strings.Replace(string(manifest), imagePlaceholder, manifestImage(img.Digest.String()), 1))
	if err := os.WriteFile(filepath.Join(o.Dir, f.deployment()), manifest, 0o644); err != nil {
		return err
	}

	bom, err := sbom(img, o.Image, o.Version, created)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.Dir, f.sbom()), bom, 0o644); err != nil {
		return err
	}

	// The image's signature: its manifest digest, for its repository.
	var ss simpleSigning
	ss.Critical.Identity.DockerReference = repository(o.Image)
	ss.Critical.Image.DockerManifestDigest = img.Digest.String()
	ss.Critical.Type = "cosign container image signature"
	ss.Optional = map[string]string{"version": o.Version, "commit": o.Commit}
	payload, err := json.Marshal(ss)
	if err != nil {
		return err
	}
	if err := writeEnvelope(ctx, key, payloadTypeSimpleSigning, payload, filepath.Join(o.Dir, f.imageSig())); err != nil {
		return err
	}

	// The provenance: what was built (every file but itself and the image
	// by its digest), from what, how.
	var subjects []*intoto.ResourceDescriptor
	for _, name := range f.subjects() {
		sum, err := fileSHA256(filepath.Join(o.Dir, name))
		if err != nil {
			return err
		}
		subjects = append(subjects, &intoto.ResourceDescriptor{Name: name, Digest: map[string]string{"sha256": sum}})
	}
	subjects = append(subjects, &intoto.ResourceDescriptor{Name: o.Image, Digest: map[string]string{"sha256": img.Digest.Hex}})
	ext, err := structpb.NewStruct(map[string]any{"version": o.Version, "image": o.Image, "target": "make release"})
	if err != nil {
		return err
	}
	internal, err := structpb.NewStruct(map[string]any{"SOURCE_DATE_EPOCH": fmt.Sprint(o.SourceDateEpoch), "go": img.Programs[0].Info.GoVersion})
	if err != nil {
		return err
	}
	pred := &provenance.Provenance{
		BuildDefinition: &provenance.BuildDefinition{
			BuildType: buildType, ExternalParameters: ext, InternalParameters: internal,
			ResolvedDependencies: []*intoto.ResourceDescriptor{{Uri: sourceURI, Digest: map[string]string{"gitCommit": o.Commit}}},
		},
		RunDetails: &provenance.RunDetails{
			Builder:  &provenance.Builder{Id: "https://github.com/outrigger-ccm/outrigger/blob/main/Makefile#release"},
			Metadata: &provenance.BuildMetadata{FinishedOn: timestamppb.New(created)},
		},
	}
	predStruct, err := toStruct(pred)
	if err != nil {
		return err
	}
	st := &intoto.Statement{Type: intoto.StatementTypeUri, Subject: subjects, PredicateType: "https://slsa.dev/provenance/v1", Predicate: predStruct}
	if err := st.Validate(); err != nil {
		return fmt.Errorf("the provenance statement: %w", err)
	}
	stJSON, err := stableJSON(st)
	if err != nil {
		return err
	}
	if err := writeEnvelope(ctx, key, payloadTypeInToto, stJSON, filepath.Join(o.Dir, f.provenance())); err != nil {
		return err
	}

	// The checksums of everything, and their signature.
	var sums strings.Builder
	for _, name := range f.signed() {
		sum, err := fileSHA256(filepath.Join(o.Dir, name))
		if err != nil {
			return err
		}
		fmt.Fprintf(&sums, "%s  %s\n", sum, name)
	}
	if err := os.WriteFile(filepath.Join(o.Dir, sumsFile), []byte(sums.String()), 0o644); err != nil {
		return err
	}
	sig := base64.StdEncoding.EncodeToString(ed25519.Sign(priv, []byte(sums.String()))) + "\n"
	if err := os.WriteFile(filepath.Join(o.Dir, sumsSigFile), []byte(sig), 0o644); err != nil {
		return err
	}
	return writePublicKey(filepath.Join(o.Dir, publicKeyFile), key.pub)
}

// manifestImage is the released manifest's image: the placeholder's
// registry, the image by its digest.
func manifestImage(digest string) string {
	return repository(imagePlaceholder) + "@" + digest
}

// builtFrom checks that the image's Go programs, where their build
// information names a commit (vcs.revision), name commit.
func builtFrom(img *image, commit string) error {
	for _, p := range img.Programs {
		for _, s := range p.Info.Settings {
			if s.Key == "vcs.revision" && s.Value != commit {
				return fmt.Errorf("the image's %s was built from commit %s, not %s", p.Path, s.Value, commit)
			}
		}
	}
	return nil
}

// repository is an image reference without its tag or digest.
func repository(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

func writeEnvelope(ctx context.Context, key ed25519Key, payloadType string, payload []byte, path string) error {
	env, err := signEnvelope(ctx, key, payloadType, payload)
	if err != nil {
		return fmt.Errorf("signing %s: %w", filepath.Base(path), err)
	}
	b, err := json.MarshalIndent(env, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// toStruct is a protobuf message as a Struct (a Statement's predicate).
func toStruct(m proto.Message) (*structpb.Struct, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	s := &structpb.Struct{}
	return s, protojson.Unmarshal(b, s)
}

// stableJSON encodes a protobuf message as JSON with sorted keys and fixed
// spacing: protojson's own output varies its whitespace on purpose, which
// would make the signed bytes differ between two builds.
func stableJSON(m proto.Message) ([]byte, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func fileSHA256(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return sha256Hex(b), nil
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
