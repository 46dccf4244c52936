//go:build race

package alerting

// raceEnabled: the replays of the labelled benchmark are one goroutine's
// arithmetic over 28 days of ten series, several times over; the race
// detector finds nothing there and makes them a minute long, so they run in
// the plain pass only.
const raceEnabled = true
