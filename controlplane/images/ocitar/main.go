// Command ocitar packs binaries into a single-layer container image
// and writes it as an OCI image layout tarball that `ctr images import`
// reads, named by the io.containerd.image.name annotation. The real-cluster
// harness (cluster/) builds every image it runs this way, from source: no
// image is pulled; Outrigger's own image (make image) too.
//
//	ocitar -binary PATH -name REF -o FILE.tar [-- ENTRYPOINT ARGS...]
//	ocitar -file SRC=/DEST [-file ...] [-link /DEST=TARGET ...] [-user UID:GID] -name REF -o FILE.tar -- ENTRYPOINT...
//
// -binary and -host-binary SRC=/DEST add a program with the shared libraries
// (and loader) ldd lists for it when it is dynamically linked: a program from
// this machine's Debian packages, or a Go program built with cgo (agnhost is
// built like the other Kubernetes binaries, with cgo, so that it shares their
// compiled packages instead of needing a CGO_ENABLED=0 build of each); and
// -busybox PATH a static busybox at /bin/busybox with a link for each of its
// applets that no other file of the image provides: upstream's e2e suite runs
// /bin/sh, nc, wget and curl inside the agnhost image, which a single static
// agnhost binary does not have.
//
// -cmd ARG (repeatable) sets the image's default arguments (its CMD), which
// a container's args replace: upstream's agnhost image runs "pause" when a
// pod gives no args, and the e2e suite's exec pods rely on that.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func main() {
	bin := flag.String("binary", "", "program to put at /<its base name>, with its libraries when dynamically linked")
	ref := flag.String("name", "", "image name, such as outrigger.local/pause:1")
	out := flag.String("o", "", "output tarball")
	var files, links, hostBins pairs
	flag.Var(&files, "file", "SRC=/DEST: a file to put at /DEST, executable (repeatable)")
	flag.Var(&hostBins, "host-binary", "SRC=/DEST: a program of this machine, with the libraries ldd lists when dynamically linked (repeatable)")
	busybox := flag.String("busybox", "", "a static busybox to put at /bin/busybox, with a link per applet")
	flag.Var(&links, "link", "/DEST=TARGET: a symbolic link (repeatable)")
	user := flag.String("user", "", "the image's user, such as 65532:65532")
	var cmd []string
	flag.Func("cmd", "an argument of the image's default command (CMD); repeat for more", func(s string) error {
		cmd = append(cmd, s)
		return nil
	})
	flag.Parse()
	if *bin != "" {
		hostBins = append(pairs{{*bin, "/" + filepath.Base(*bin)}}, hostBins...)
	}
	var err error
	if files, err = addHostBinaries(files, hostBins); err == nil && *busybox != "" {
		files, links, err = addBusybox(files, links, *busybox)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ocitar:", err)
		os.Exit(1)
	}
	if err := build(files, links, *user, *ref, *out, flag.Args(), cmd); err != nil {
		fmt.Fprintln(os.Stderr, "ocitar:", err)
		os.Exit(1)
	}
}

// pairs is a repeatable A=B flag.
type pairs [][2]string

func (p *pairs) String() string { return fmt.Sprint(*p) }
func (p *pairs) Set(v string) error {
	a, b, ok := strings.Cut(v, "=")
	if !ok || a == "" || b == "" {
		return fmt.Errorf("%q: want A=B", v)
	}
	*p = append(*p, [2]string{a, b})
	return nil
}

func build(files, links pairs, user, ref, out string, entrypoint, cmd []string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image name %q: %w", ref, err)
	}
	if len(files) == 0 {
		return fmt.Errorf("no -binary or -file given")
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// Fixed times: the same binaries give the same image digest.
	epoch := time.Unix(0, 0)
	dirs := map[string]bool{}
	mkdirs := func(p string) error {
		var parents []string
		for d := path.Dir(p); d != "/" && d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
			dirs[d] = true
		}
		for _, d := range parents {
			if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir}); err != nil {
				return err
			}
		}
		return nil
	}
	for _, f := range files {
		data, err := os.ReadFile(f[0])
		if err != nil {
			return err
		}
		if err := mkdirs(f[1]); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(f[1], "/"), Mode: 0o755, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	for _, l := range links {
		if err := mkdirs(l[0]); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(l[0], "/"), Linkname: l[1], Mode: 0o777, ModTime: epoch, Typeflag: tar.TypeSymlink}); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if len(entrypoint) == 0 {
		entrypoint = []string{files[0][1]}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = entrypoint
	cf.Config.Cmd = cmd
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/"}
	cf.Config.User = user
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "ocitar-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img,
		layout.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}),
		layout.WithAnnotations(map[string]string{
			"io.containerd.image.name":          tag.String(),
			"org.opencontainers.image.ref.name": tag.TagStr(),
		})); err != nil {
		return err
	}
	return tarDir(dir, out)
}

// tarDir writes the layout directory as the tarball `ctr images import`
// takes, in a fixed order with fixed owners and times.
func tarDir(dir, out string) error {
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		// Nothing of this machine or this moment in the tarball: the same
		// image gives the same bytes (a reproducible release).
		h.ModTime, h.AccessTime, h.ChangeTime = time.Unix(0, 0), time.Time{}, time.Time{}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.IsDir() {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, out)
}

// addHostBinaries adds each program and, when it is dynamically linked, the
// shared libraries (and loader) ldd resolves for it, at their paths on this
// machine, once each.
func addHostBinaries(files, bins pairs) (pairs, error) {
	have := map[string]bool{}
	for _, f := range files {
		have[f[1]] = true
	}
	for _, b := range bins {
		dyn, err := dynamic(b[0])
		if err != nil {
			return nil, err
		}
		if !dyn {
			files = append(files, b)
			have[b[1]] = true
			continue
		}
		out, err := exec.Command("ldd", b[0]).Output()
		if err != nil {
			return nil, fmt.Errorf("ldd %s (is it a dynamically linked program?): %w", b[0], err)
		}
		files = append(files, b)
		have[b[1]] = true
		libs, err := lddPaths(string(out))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b[0], err)
		}
		for _, lib := range libs {
			if !have[lib] {
				files = append(files, [2]string{lib, lib})
				have[lib] = true
			}
		}
	}
	return files, nil
}

// dynamic reports whether the ELF program at path names a loader
// (PT_INTERP), which a static program has none of.
func dynamic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, fmt.Errorf("reading the program %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true, nil
		}
	}
	return false, nil
}

// lddPaths reads the absolute library paths from ldd's output: lines
// "libx.so.1 => /lib/.../libx.so.1 (0x...)" and the loader's
// "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO has no file. A library
// ldd cannot find is an error: the program would not start in the image.
func lddPaths(out string) ([]string, error) {
	var paths []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && f[2] == "not":
			return nil, fmt.Errorf("library %s not found", f[0])
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			paths = append(paths, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			paths = append(paths, f[0])
		}
	}
	return paths, nil
}

// addBusybox adds busybox at /bin/busybox and a link for each applet it
// lists (busybox --list-full) whose path no other file or link takes.
func addBusybox(files, links pairs, bb string) (pairs, pairs, error) {
	out, err := exec.Command(bb, "--list-full").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("%s --list-full: %w", bb, err)
	}
	taken := map[string]bool{"/bin/busybox": true}
	for _, f := range files {
		taken[f[1]] = true
	}
	for _, l := range links {
		taken[l[0]] = true
	}
	files = append(files, [2]string{bb, "/bin/busybox"})
	for _, applet := range strings.Fields(string(out)) {
		p := "/" + strings.TrimPrefix(applet, "/")
		if !taken[p] {
			links = append(links, [2]string{p, "/bin/busybox"})
			taken[p] = true
		}
	}
	return files, links, nil
}
