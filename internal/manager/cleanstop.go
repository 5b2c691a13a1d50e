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
//
// Its methods are one frame between logr.Logger and the wrapped sink, which
// the wrapped sink is told (WithCallDepth), so that a line names its caller's
// file and line, not the runtime's (asm_amd64.s) or this file.
type cleanStopSink struct{ logr.LogSink }

const (
	msgAfterStop          = "error received after stop sequence was engaged"
	errLeaderElectionLost = "leader election lost"
)

// Init does nothing: the wrapped sink was initialized by the Logger it came
// from, for that Logger's own frame; initializing it again would count that
// frame twice.
func (cleanStopSink) Init(logr.RuntimeInfo) {}

func (s cleanStopSink) Enabled(level int) bool { return s.LogSink.Enabled(level) }

func (s cleanStopSink) Info(level int, msg string, kv ...any) { s.LogSink.Info(level, msg, kv...) }

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

// WithCallDepth passes depth on (logr.Logger.WithCallDepth, helpers).
func (s cleanStopSink) WithCallDepth(depth int) logr.LogSink {
	return cleanStopSink{withCallDepth(s.LogSink, depth)}
}

func withCallDepth(sink logr.LogSink, depth int) logr.LogSink {
	if d, ok := sink.(logr.CallDepthLogSink); ok {
		return d.WithCallDepth(depth)
	}
	return sink
}

// withCleanStop wraps log's sink in cleanStopSink. WithSink, not logr.New:
// the sink is already initialized.
func withCleanStop(log logr.Logger) logr.Logger {
	if log.GetSink() == nil {
		return log
	}
	return log.WithSink(cleanStopSink{withCallDepth(log.GetSink(), 1)})
}
