// Command package-chart packages the Helm chart charts/outrigger into
// OUTDIR/outrigger-VERSION.tgz with Helm's Go packages, as `helm package`
// does, without a helm binary (make release runs it):
//
//	go run ./cmd/package-chart -o OUTDIR [-version VERSION] [-mtime SECONDS] [-image-digest sha256:HEX]
//
// With -version it fails unless the chart's version and appVersion are
// VERSION. With -mtime every file of the archive is dated SECONDS since
// 1970 (make release: the commit's time), so the archive is reproducible.
// With -image-digest the packaged values.yaml's image.digest is the image's
// manifest digest (make release: its image's), so the chart pulls the
// image by digest.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	charttest "github.com/outrigger-ccm/outrigger/charts/test"
)

func main() {
	out := flag.String("o", "", "the directory to write the packaged chart to")
	version := flag.String("version", "", "the version the chart must have (version and appVersion)")
	mtime := flag.Int64("mtime", -1, "date every file of the archive this many seconds since 1970 (default: now)")
	digest := flag.String("image-digest", "", "the image's manifest digest (sha256:HEX), written as the packaged chart's image.digest")
	flag.Parse()
	if *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: package-chart -o OUTDIR [-version VERSION] [-mtime SECONDS] [-image-digest sha256:HEX]")
		os.Exit(2)
	}
	when := time.Now()
	if *mtime >= 0 {
		when = time.Unix(*mtime, 0)
	}
	path, err := charttest.PackageWith(charttest.Dir(), *out, charttest.PackageOptions{Version: *version, ModTime: when, ImageDigest: *digest})
	if err != nil {
		fmt.Fprintln(os.Stderr, "package-chart:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}
