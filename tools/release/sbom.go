package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net/url"
	"sort"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// sbom is the CycloneDX bill of materials of the image: the image as the
// described component (by its manifest digest), each Go program in it with
// its SHA-256, and each module a program was built from (the Go build
// information: path, version, and whether a replace changed it), with
// which program depends on which module. Its serial number and timestamp
// derive from its inputs, so it is the same for the same image.
func sbom(img *image, imageRef, version string, created time.Time) ([]byte, error) {
	bom := cdx.NewBOM()
	sum := sha256.Sum256([]byte(img.Digest.String()))
	sum[6], sum[8] = sum[6]&0x0f|0x50, sum[8]&0x3f|0x80 // a name-based (v5-shaped) UUID
	bom.SerialNumber = fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
	imageRefID := "image:" + img.Digest.String()
	bom.Metadata = &cdx.Metadata{
		Timestamp: created.UTC().Format(time.RFC3339),
		Component: &cdx.Component{
			BOMRef: imageRefID, Type: cdx.ComponentTypeContainer, Name: imageRef, Version: version,
			PackageURL: "pkg:oci/outrigger@" + url.PathEscape(img.Digest.String()) + "?repository_url=" + url.QueryEscape(imageRef),
			Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: img.Digest.Hex}},
		},
	}
	modules := map[string]cdx.Component{}
	var components []cdx.Component
	deps := []cdx.Dependency{}
	var programRefs []string
	for _, p := range img.Programs {
		ref := "file:" + p.Path
		programRefs = append(programRefs, ref)
		props := []cdx.Property{{Name: "go:version", Value: p.Info.GoVersion}}
		for _, s := range p.Info.Settings {
			props = append(props, cdx.Property{Name: "go:build:" + s.Key, Value: s.Value})
		}
		components = append(components, cdx.Component{
			BOMRef: ref, Type: cdx.ComponentTypeApplication, Name: p.Path, Version: p.Info.Main.Version,
			PackageURL: purl(p.Info.Main.Path, p.Info.Main.Version),
			Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: p.SHA256}},
			Properties: &props,
		})
		var uses []string
		for _, d := range p.Info.Deps {
			m := d
			if d.Replace != nil {
				m = d.Replace
			}
			c := cdx.Component{BOMRef: purl(m.Path, m.Version), Type: cdx.ComponentTypeLibrary, Name: m.Path, Version: m.Version, PackageURL: purl(m.Path, m.Version)}
			if d.Replace != nil {
				c.Properties = &[]cdx.Property{{Name: "go:replaces", Value: d.Path + "@" + d.Version}}
			}
			modules[c.BOMRef] = c
			uses = append(uses, c.BOMRef)
		}
		sort.Strings(uses)
		deps = append(deps, cdx.Dependency{Ref: ref, Dependencies: &uses})
	}
	refs := make([]string, 0, len(modules))
	for r := range modules {
		refs = append(refs, r)
	}
	sort.Strings(refs)
	for _, r := range refs {
		components = append(components, modules[r])
	}
	deps = append([]cdx.Dependency{{Ref: imageRefID, Dependencies: &programRefs}}, deps...)
	bom.Components = &components
	bom.Dependencies = &deps
	var buf bytes.Buffer
	if err := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON).SetPretty(true).Encode(bom); err != nil {
		return nil, fmt.Errorf("encoding the SBOM: %w", err)
	}
	return buf.Bytes(), nil
}

// purl is a Go module's package URL.
func purl(path, version string) string {
	return "pkg:golang/" + path + "@" + url.PathEscape(version)
}

// readSBOM decodes a CycloneDX JSON SBOM.
func readSBOM(r io.Reader) (*cdx.BOM, error) {
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(r, cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		return nil, fmt.Errorf("decoding the SBOM: %w", err)
	}
	return &bom, nil
}
