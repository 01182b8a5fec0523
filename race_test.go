//go:build race

package sluice_test

// raceEnabled: the race detector is on; it moves crypto/rand.Read's
// buffer to the heap, one allocation more per permit id.
const raceEnabled = true
