package plugintoken

import "time"

// When a token is replaced, and how failed requests are retried.
const (
	// refreshFraction of a token's lifetime passes before it is replaced,
	// as the kubelet replaces a projected ServiceAccount token: a plugin
	// re-reads the file every minute (client-go's cached file token
	// source), so it holds a new token long before the old one expires,
	// and a failing TokenRequest API has the rest of the lifetime to
	// recover.
	refreshFraction = 0.8
	// A failed request is retried after minBackoff, doubling up to
	// maxBackoff for as long as it fails: well within what is left of a
	// lifetime of an hour.
	minBackoff = time.Second
	maxBackoff = time.Minute
)

// held is the token last written: when it was asked for (by the writer's
// clock) and how long the API server granted it for. The zero value is no
// token yet.
type held struct {
	requested time.Time
	lifetime  time.Duration
}

// expires is when the token stops working, by the writer's clock.
func (h held) expires() time.Time { return h.requested.Add(h.lifetime) }

// nextRequest decides when the next token is asked for: at once when there
// is none; refreshFraction into the lifetime of the one held; after a
// backoff while requests fail (failures in a row). The lifetime is the one
// the API server granted, counted from before the request on the writer's
// own clock, so a skew between the two clocks moves nothing.
func nextRequest(now time.Time, h held, failures int) time.Time {
	if failures > 0 {
		return now.Add(backoff(failures))
	}
	if h.lifetime <= 0 {
		return now
	}
	return h.requested.Add(time.Duration(float64(h.lifetime) * refreshFraction))
}

// backoff is the wait after failures requests failed in a row.
func backoff(failures int) time.Duration {
	d := minBackoff
	for i := 1; i < failures && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}
