// Events and cloud calls as the console's timeline entries.

package console

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

func entryOf(e *corev1.Event) Entry {
	obj := e.InvolvedObject.Kind + "/"
	if e.InvolvedObject.Namespace != "" {
		obj += e.InvolvedObject.Namespace + "/"
	}
	obj += e.InvolvedObject.Name
	src := e.Source.Component
	if src == "" {
		src = e.ReportingController
	}
	return Entry{Time: eventTime(e), Kind: "event", Type: e.Type, Object: obj, Reason: e.Reason, Message: e.Message, Source: src, Count: e.Count}
}

// eventsByObject indexes the newest Events per involved object.
func eventsByObject(events []*corev1.Event) map[string][]Entry {
	sorted := slices.Clone(events)
	slices.SortFunc(sorted, func(a, b *corev1.Event) int { return eventTime(b).Compare(eventTime(a)) })
	out := map[string][]Entry{}
	for _, e := range sorted {
		k := entryOf(e).Object
		if len(out[k]) < maxEventsPerObject {
			out[k] = append(out[k], entryOf(e))
		}
	}
	return out
}

// timeline merges Events and call entries, newest first.
func timeline(events []*corev1.Event, calls []Entry) []Entry {
	out := make([]Entry, 0, len(events)+len(calls))
	for _, e := range events {
		out = append(out, entryOf(e))
	}
	out = append(out, calls...)
	slices.SortStableFunc(out, func(a, b Entry) int { return b.Time.Compare(a.Time) })
	if len(out) > maxTimeline {
		out = out[:maxTimeline]
	}
	return out
}

// poolUsage counts what of r is taken: load balancer addresses for a VIP
// range, node pod CIDRs for a cluster CIDR.
