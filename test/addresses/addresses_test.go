// Package addresses_test checks that no tracked file names an IPv4 address
// or prefix from a private range (RFC 1918) or from the shared address
// space (RFC 6598): what a test, demo, default or doc configures is on
// loopback or from 198.18.0.0/15, which no real network the project runs
// next to uses.
package addresses_test

import (
	"bytes"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository's top directory, from this package's.
const root = "../.."

// forbidden are the ranges no tracked file may name, built from bytes so
// that this file does not name them itself.
var forbidden = []netip.Prefix{
	netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, 0}), 8),
	netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 16, 0, 0}), 12),
	netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 168, 0, 0}), 16),
	netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 64, 0, 0}), 10),
}

// allowed lists the files that may name such an address, each with why.
// Empty: nothing needs one.
var allowed = map[string]string{}

// dottedRun is a run of digits and dots: an address when it holds four
// numbers (a trailing dot ends a sentence), a version such as 1.10.0.0.1
// otherwise.
var dottedRun = regexp.MustCompile(`[0-9.]+`)

// privateAddresses returns the forbidden addresses in text, by line number.
func privateAddresses(text []byte) map[int][]string {
	found := map[int][]string{}
	for i, line := range bytes.Split(text, []byte("\n")) {
		for _, run := range dottedRun.FindAll(line, -1) {
			a, err := netip.ParseAddr(strings.TrimRight(string(run), "."))
			if err != nil || !a.Is4() {
				continue
			}
			for _, p := range forbidden {
				if p.Contains(a) {
					found[i+1] = append(found[i+1], a.String())
				}
			}
		}
	}
	return found
}

func TestPrivateAddressesFound(t *testing.T) {
	ten := netip.AddrFrom4([4]byte{10, 1, 2, 3}).String()
	shared := netip.AddrFrom4([4]byte{100, 64, 0, 1}).String()
	text := "a " + ten + "/24 " + ten + ".\nv1." + ten + ".4 and 1." + ten + "\n" +
		`"` + shared + `"` + "\n198.18.0.1 127.0.0.1 192.0.2.1 172.32.0.1 100.128.0.1 fd00::1\n" + ten
	got := privateAddresses([]byte(text))
	if len(got) != 3 || len(got[1]) != 2 || len(got[3]) != 1 || len(got[5]) != 1 {
		t.Errorf("found %v; want %s twice on line 1 and once on line 5, %s on line 3, nothing else", got, ten, shared)
	}
}

func TestNoPrivateAddressesInTrackedFiles(t *testing.T) {
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	for _, path := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		// go.sum holds module hashes and versions, never an address.
		if path == "" || filepath.Base(path) == "go.sum" || allowed[path] != "" {
			continue
		}
		text, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree, not yet in the index
			}
			t.Fatal(err)
		}
		if bytes.IndexByte(text, 0) >= 0 {
			continue // binary
		}
		for line, addrs := range privateAddresses(text) {
			t.Errorf("%s:%d: %s: use loopback or 198.18.0.0/15", path, line, strings.Join(addrs, ", "))
		}
	}
}
