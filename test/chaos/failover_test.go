package chaos

import (
	"testing"
	"time"
)

func TestSpread(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name string
		in   []time.Duration
		want Spread
	}{
		{"none", nil, Spread{}},
		{"one", []time.Duration{15 * s}, Spread{Count: 1, Min: 15, Median: 15, Max: 15}},
		{"odd count, unsorted, one above", []time.Duration{18 * s, 14 * s, 16 * s}, Spread{Count: 3, Min: 14, Median: 16, Max: 18, Over: 1}},
		{"even count: mean of the middle two", []time.Duration{14 * s, 15 * s, 16 * s, 17 * s}, Spread{Count: 4, Min: 14, Median: 15.5, Max: 17}},
		{"the bound itself is not above it", []time.Duration{17 * s, 17*s + time.Millisecond*10}, Spread{Count: 2, Min: 17, Median: 17.01, Max: 17.01, Over: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := spread(tc.in, 17*s); got != tc.want {
				t.Errorf("spread(%v) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}
