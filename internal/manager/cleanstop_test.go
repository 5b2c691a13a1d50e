package manager

import (
	"errors"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// A clean stop releases the Lease; controller-runtime reports that as an
// error after the stop began: logged at info level instead. Any other error
// stays an error.
func TestCleanStopIsNotAnError(t *testing.T) {
	for _, tc := range []struct {
		err       error
		msg       string
		wantError bool
	}{
		{errors.New("leader election lost"), "error received after stop sequence was engaged", false},
		{errors.New("leader election lost"), "problem running manager", true},
		{errors.New("cache did not sync"), "error received after stop sequence was engaged", true},
	} {
		var errs, infos int
		base := funcr.New(func(prefix, args string) {}, funcr.Options{})
		sink := recordingSink{LogSink: base.GetSink(), errs: &errs, infos: &infos}
		log := withCleanStop(logr.New(sink)).WithName("manager").WithValues("k", "v")
		log.Error(tc.err, tc.msg)
		if got := errs == 1; got != tc.wantError || errs+infos != 1 {
			t.Errorf("%q / %v: %d errors, %d infos; want an error: %v", tc.msg, tc.err, errs, infos, tc.wantError)
		}
	}
}

type recordingSink struct {
	logr.LogSink
	errs, infos *int
}

func (s recordingSink) Error(error, string, ...any)    { *s.errs++ }
func (s recordingSink) Info(int, string, ...any)       { *s.infos++ }
func (s recordingSink) Enabled(int) bool               { return true }
func (s recordingSink) WithValues(...any) logr.LogSink { return s }
func (s recordingSink) WithName(string) logr.LogSink   { return s }
