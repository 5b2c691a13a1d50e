//go:build race

package plugin_test

// raceDetector says the race detector is on: it makes JSON coding about ten
// times slower, too slow for the largest cases.
const raceDetector = true
