// Command release makes a release verifiable and verifies one (make release
// runs it; docs/install.md shows the verify command):
//
//	release keygen -key KEY.pem -pub KEY.pub
//	release fingerprint -key KEY.pub
//	release check-key -key KEY.pem -pub PINNED.pub
//	release digest -image IMAGE.tar
//	release attest -dir DIR -key KEY.pem -pub PINNED.pub -deploy deploy/deployment.yaml -version V -commit SHA -image REF -source-date-epoch N
//	release verify -dir DIR -key PINNED.pub
//	release tag -repo DIR -version V
//
// The project's public key is pinned: release-key.pub in this directory,
// its fingerprint (fingerprint: the SHA-256 of its PKIX form) published in
// README.md, docs/install.md and SECURITY.md. check-key and attest refuse a
// private key whose public half is not the pinned key; keygen is the
// first-time setup of a fork's own key (make release-key), never run by
// make release. digest prints an image tarball's manifest digest, which
// make release writes into the packaged chart's image.digest.
//
// attest reads the image tarball and the chart in DIR and writes beside
// them: deploy/deployment.yaml with the image by digest, a CycloneDX SBOM of the image's binaries (from their Go build
// information), an in-toto Statement with a SLSA v1 provenance predicate
// naming every artifact, the image's manifest digest and the source commit
// (a resolved dependency, so the signature covers it), signed in a DSSE
// envelope, a signature of the image (its manifest digest, in the
// simple-signing form container tools use) in another, the checksums
// (SHA256SUMS), their detached signature (SHA256SUMS.sig) and the public
// key. Keys are Ed25519 (PKCS #8 and PKIX PEM): signing needs no network
// service. Everything it writes is a function of its inputs, so the same
// commit gives the same bytes.
//
// verify checks all of it against the pinned public key (not the one in
// DIR), that the provenance names every file, the image and a source
// commit, and that the chart and the manifest pull the image by the
// verified digest; it fails on any changed byte. tag names the release commit
// v<V>, the version a provider's go.mod requires.
package main

import (
	"context"
	"crypto/ed25519"
	"flag"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "keygen":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		key := fs.String("key", "", "where to write the private key (PEM)")
		pub := fs.String("pub", "", "where to write the public key (PEM)")
		_ = fs.Parse(args)
		if *key == "" || *pub == "" {
			usage()
		}
		err = keygen(*key, *pub)
	case "fingerprint":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		pub := fs.String("key", "", "the public key (PEM)")
		_ = fs.Parse(args)
		if *pub == "" {
			usage()
		}
		var k ed25519.PublicKey
		if k, err = readPublicKey(*pub); err == nil {
			var fp string
			if fp, err = fingerprint(k); err == nil {
				fmt.Println(fp)
			}
		}
	case "check-key":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		key := fs.String("key", "", "the private key (PEM)")
		pub := fs.String("pub", "", "the pinned public key (PEM)")
		_ = fs.Parse(args)
		if *key == "" || *pub == "" {
			usage()
		}
		_, err = checkPinned(*key, *pub)
	case "digest":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		tarball := fs.String("image", "", "the image tarball (an OCI layout)")
		_ = fs.Parse(args)
		if *tarball == "" {
			usage()
		}
		var img *image
		if img, err = readImage(*tarball); err == nil {
			fmt.Println(img.Digest)
		}
	case "attest":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		var o attestOptions
		fs.StringVar(&o.Dir, "dir", "", "the release directory: the image tarball and the packaged chart")
		fs.StringVar(&o.Key, "key", "", "the private key (PEM)")
		fs.StringVar(&o.Pub, "pub", "", "the pinned public key (PEM): the private key's public half")
		fs.StringVar(&o.Deploy, "deploy", "", "deploy/deployment.yaml, released with the image by digest")
		fs.StringVar(&o.Version, "version", "", "the release's version, e.g. 0.2.0")
		fs.StringVar(&o.Commit, "commit", "", "the git commit it is built from")
		fs.StringVar(&o.Image, "image", "", "the image's reference, e.g. outrigger.local/outrigger:0.2.0")
		fs.Int64Var(&o.SourceDateEpoch, "source-date-epoch", 0, "the commit's time (seconds since 1970): every timestamp written")
		_ = fs.Parse(args)
		if o.Dir == "" || o.Key == "" || o.Pub == "" || o.Deploy == "" || o.Version == "" || o.Commit == "" || o.Image == "" {
			usage()
		}
		err = attest(context.Background(), o)
	case "tag":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		var o tagOptions
		fs.StringVar(&o.Repo, "repo", ".", "the repository whose HEAD is the release commit")
		fs.StringVar(&o.Version, "version", "", "the release's version, e.g. 0.3.0")
		_ = fs.Parse(args)
		if o.Version == "" {
			usage()
		}
		err = tag(context.Background(), o)
	case "verify":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		dir := fs.String("dir", "", "the release directory")
		pub := fs.String("key", "", "the pinned public key (PEM)")
		_ = fs.Parse(args)
		if *dir == "" || *pub == "" {
			usage()
		}
		var r *verified
		if r, err = verify(context.Background(), *dir, *pub); err == nil {
			r.print(os.Stdout)
		}
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage:
  release keygen -key KEY.pem -pub KEY.pub
  release fingerprint -key KEY.pub
  release check-key -key KEY.pem -pub PINNED.pub
  release digest -image IMAGE.tar
  release attest -dir DIR -key KEY.pem -pub PINNED.pub -deploy MANIFEST -version V -commit SHA -image REF -source-date-epoch N
  release verify -dir DIR -key PINNED.pub
  release tag -repo DIR -version V`)
	os.Exit(2)
}
