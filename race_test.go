//go:build race

package sluice_test

// raceEnabled: the race detector is on; with it, a sync.Pool drops some
// of what it is given, so the pools a permit draws from allocate now and
// then.
const raceEnabled = true
