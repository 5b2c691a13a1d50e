package plugintoken

import (
	"testing"
	"time"
)

// TestNextRequest: a token is asked for at once when none is held, at 80 %
// of the lifetime the API server granted (counted from before the
// request), and after a backoff of 1s doubling to a minute while requests
// fail, whatever is held.
func TestNextRequest(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	now := t0.Add(50 * time.Minute)
	hour := held{requested: t0, lifetime: time.Hour}
	tests := []struct {
		name     string
		held     held
		failures int
		want     time.Time
	}{
		{"no token yet: at once", held{}, 0, now},
		{"an hour's token: after 48 minutes", hour, 0, t0.Add(48 * time.Minute)},
		{"a shorter lifetime granted: 80 % of it", held{requested: t0, lifetime: 10 * time.Minute}, 0, t0.Add(8 * time.Minute)},
		{"one failure: a second later", hour, 1, now.Add(time.Second)},
		{"three failures: four seconds later", hour, 3, now.Add(4 * time.Second)},
		{"no token and failing: backoff too", held{}, 2, now.Add(2 * time.Second)},
		{"many failures: a minute at most", hour, 40, now.Add(time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nextRequest(now, tt.held, tt.failures); !got.Equal(tt.want) {
				t.Errorf("nextRequest = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestExpiryIsTheLifetimeFromTheRequest: a token held expires its granted
// lifetime after it was asked for.
func TestExpiryIsTheLifetimeFromTheRequest(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	if got := (held{requested: t0, lifetime: time.Hour}).expires(); !got.Equal(t0.Add(time.Hour)) {
		t.Errorf("expires %s", got)
	}
}
