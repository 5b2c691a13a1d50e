// Command package-chart packages the Helm chart charts/outrigger into
// OUTDIR/outrigger-VERSION.tgz with Helm's Go packages, as `helm package`
// does, without a helm binary (make release runs it):
//
//	go run ./cmd/package-chart -o OUTDIR [-version VERSION]
//
// With -version it fails unless the chart's version and appVersion are
// VERSION.
package main

import (
	"flag"
	"fmt"
	"os"

	charttest "github.com/outrigger-ccm/outrigger/charts/test"
)

func main() {
	out := flag.String("o", "", "the directory to write the packaged chart to")
	version := flag.String("version", "", "the version the chart must have (version and appVersion)")
	flag.Parse()
	if *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: package-chart -o OUTDIR [-version VERSION]")
		os.Exit(2)
	}
	path, err := charttest.Package(charttest.Dir(), *out, *version)
	if err != nil {
		fmt.Fprintln(os.Stderr, "package-chart:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}
