package manager

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"sync"
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"
)

// The lines controller-runtime logs through the manager's logger (its
// controllers, sources, leader election) name their caller's file and line,
// as every other line does: not the runtime's (asm_amd64.s) nor a wrapper's.
// Through klog's own output (`outrigger dev`) and through the text logger
// that --logging-format=text installs in klog (`outrigger`).
func TestManagerLogLinesNameTheirCaller(t *testing.T) {
	ctrl.SetLogger(klog.NewKlogr()) // as Main and testenv.Main do (a no-op when done already)
	for _, out := range []struct {
		name    string
		capture func(t *testing.T, w io.Writer)
	}{
		{"klog", func(t *testing.T, w io.Writer) {
			fs := flag.NewFlagSet("klog", flag.PanicOnError)
			klog.InitFlags(fs)
			for name, value := range map[string]string{"logtostderr": "false", "stderrthreshold": "FATAL"} {
				was := fs.Lookup(name).Value.String()
				if err := fs.Set(name, value); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if err := fs.Set(name, was); err != nil {
						t.Error(err)
					}
				})
			}
			klog.SetOutput(w)
			t.Cleanup(func() { klog.SetOutput(os.Stderr) })
		}},
		{"text logger", func(t *testing.T, w io.Writer) {
			klog.SetLoggerWithOptions(textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(w))), klog.ContextualLogger(true))
			t.Cleanup(klog.ClearLogger)
		}},
	} {
		t.Run(out.name, func(t *testing.T) {
			var buf syncBuffer
			out.capture(t, &buf)
			log := managerOptions(NewOptions()).Logger
			want := map[string]int{} // message: line
			line := func() int { _, _, l, _ := runtime.Caller(1); return l }

			want["info"] = line() + 1
			log.Info("info")
			want["error"] = line() + 1
			log.Error(errors.New("boom"), "error")
			want["Leader election Lease released at stop"] = line() + 1
			log.Error(errors.New(errLeaderElectionLost), msgAfterStop)
			want["named"] = line() + 1
			log.WithName("controller").WithValues("controller", "node").Info("named")
			want["depth"] = line() + 1
			func() { log.WithCallDepth(1).Info("depth") }()
			done := make(chan struct{})
			go func() {
				defer close(done)
				// A goroutine's first frame: one frame too many is the runtime's.
				want["in a goroutine"] = line() + 1
				log.WithValues("controller", "node").Info("in a goroutine")
			}()
			<-done
			want["controller-runtime"] = line() + 1
			ctrl.Log.WithName("controller-runtime").Info("controller-runtime")
			klog.Flush()

			got := buf.String()
			for msg, l := range want {
				m := regexp.MustCompile(`(?m)^[IE]\d{4} [^\]]* (\S+)\] "` + regexp.QuoteMeta(msg) + `"`).FindStringSubmatch(got)
				if m == nil {
					t.Errorf("no line %q in:\n%s", msg, got)
				} else if w := fmt.Sprintf("logcaller_test.go:%d", l); m[1] != w {
					t.Errorf("line %q names %s, want %s", msg, m[1], w)
				}
			}
		})
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
