package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"
)

// ProfileEnv names a directory: with it set, SIGUSR1 starts a CPU profile
// written to <dir>/<name>.pprof, the name read from <dir>/next, and
// SIGUSR2 ends it (a name in <dir>/next at start starts one at once); meanwhile the goroutines are written, aggregated, to
// <dir>/<name>-goroutines-<i>.txt every 2 s (where the workers wait).
// bench/scale -profile uses it to profile one phase.
const ProfileEnv = "OUTRIGGER_BENCH_PROFILE"

func profileOnSignals() {
	dir := os.Getenv(ProfileEnv)
	if dir == "" {
		return
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	// A name waiting at start profiles from the start (the nodes phase).
	if _, err := os.Stat(filepath.Join(dir, "next")); err == nil {
		sigs <- syscall.SIGUSR1
	}
	go func() {
		var f *os.File
		var stopDump chan struct{}
		for sig := range sigs {
			switch {
			case sig == syscall.SIGUSR1 && f == nil:
				name, err := os.ReadFile(filepath.Join(dir, "next"))
				if err != nil {
					fmt.Fprintf(os.Stderr, "profile: %v\n", err)
					continue
				}
				// Taken: a restarted process does not profile again.
				_ = os.Remove(filepath.Join(dir, "next"))
				if f, err = os.Create(filepath.Join(dir, strings.TrimSpace(string(name))+".pprof")); err != nil {
					fmt.Fprintf(os.Stderr, "profile: %v\n", err)
					continue
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					fmt.Fprintf(os.Stderr, "profile: %v\n", err)
					f.Close()
					f = nil
					continue
				}
				stopDump = make(chan struct{})
				go dumpGoroutines(filepath.Join(dir, strings.TrimSpace(string(name))), stopDump)
			case sig == syscall.SIGUSR2 && f != nil:
				pprof.StopCPUProfile()
				f.Close()
				f = nil
				close(stopDump)
			}
		}
	}()
}

func dumpGoroutines(prefix string, stop <-chan struct{}) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		f, err := os.Create(fmt.Sprintf("%s-goroutines-%d.txt", prefix, i))
		if err != nil {
			return
		}
		_ = pprof.Lookup("goroutine").WriteTo(f, 1)
		f.Close()
	}
}
