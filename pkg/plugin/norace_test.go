//go:build !race

package plugin_test

// raceDetector says the race detector is on (see race_test.go).
const raceDetector = false
