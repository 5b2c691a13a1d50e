package poll

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as the real one does.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r)
}

func run(f func(t testing.TB)) (msg string) {
	r := &recorder{}
	defer func() {
		if v := recover(); v != nil && v != r {
			panic(v)
		}
		msg = r.msg
	}()
	f(r)
	return ""
}

func TestEventuallyReturnsOnceTheFactHolds(t *testing.T) {
	n := 0
	msg := run(func(tb testing.TB) {
		Eventually(tb, 10*time.Second, "the third poll", func() (bool, error) { n++; return n == 3, nil })
	})
	if msg != "" || n != 3 {
		t.Fatalf("failed with %q after %d polls, want success on the third", msg, n)
	}
}

func TestEventuallyFailsWithTheLastError(t *testing.T) {
	msg := run(func(tb testing.TB) {
		Eventually(tb, 20*time.Millisecond, "a fact that never comes", func() (bool, error) { return false, errors.New("still 0 nodes") })
	})
	if !strings.Contains(msg, "a fact that never comes") || !strings.Contains(msg, "still 0 nodes") {
		t.Fatalf("message %q, want what was awaited and the last error", msg)
	}
}

func TestUntil(t *testing.T) {
	if msg := run(func(tb testing.TB) { Until(tb, 20*time.Millisecond, "never", func() bool { return false }) }); !strings.Contains(msg, "timed out after 20ms waiting for never") {
		t.Fatalf("message %q", msg)
	}
}

func TestConsistentlyFailsOnTheChange(t *testing.T) {
	passes := 0
	msg := run(func(tb testing.TB) {
		Consistently(tb, 10*time.Second, "the Service keeps its IP", Count(func() int { passes++; return passes }), 5, func() error {
			if passes >= 2 {
				return errors.New("ingress changed")
			}
			return nil
		})
	})
	if !strings.Contains(msg, "no longer true: the Service keeps its IP: ingress changed") {
		t.Fatalf("message %q", msg)
	}
}
