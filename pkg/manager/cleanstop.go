package manager

import (
	"github.com/go-logr/logr"
)

// cleanStopSink is the manager's log sink. With ReleaseOnCancel, a clean
// stop (SIGTERM of a pod, Ctrl-C) releases the leader Lease, and
// controller-runtime reports that as the error "leader election lost"
// received after the stop began, logged at error level, which would page
// whoever alerts on error logs. That one line becomes an info line; a Lease
// lost while running still stops the manager with its error.
type cleanStopSink struct{ logr.LogSink }

const (
	msgAfterStop          = "error received after stop sequence was engaged"
	errLeaderElectionLost = "leader election lost"
)

func (s cleanStopSink) Error(err error, msg string, kv ...any) {
	if err != nil && msg == msgAfterStop && err.Error() == errLeaderElectionLost {
		s.LogSink.Info(0, "Leader election Lease released at stop", kv...)
		return
	}
	s.LogSink.Error(err, msg, kv...)
}

func (s cleanStopSink) WithValues(kv ...any) logr.LogSink {
	return cleanStopSink{s.LogSink.WithValues(kv...)}
}

func (s cleanStopSink) WithName(name string) logr.LogSink {
	return cleanStopSink{s.LogSink.WithName(name)}
}

// withCleanStop wraps log's sink in cleanStopSink.
func withCleanStop(log logr.Logger) logr.Logger {
	if log.GetSink() == nil {
		return log
	}
	return logr.New(cleanStopSink{log.GetSink()})
}
