package sluice

import "testing"

// TestLostChannelOnDemand: Lost's channel is closed whether it was made
// before the permit was lost or after; a permit that does not renew has
// none.
func TestLostChannelOnDemand(t *testing.T) {
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	before := &Permit{renewing: true}
	c := before.Lost()
	if closed(c) {
		t.Fatal("closed before it was lost")
	}
	before.markLost()
	before.markLost()
	if !closed(c) || before.Lost() != c {
		t.Fatal("made before: not closed when lost")
	}
	after := &Permit{renewing: true}
	after.markLost()
	if !closed(after.Lost()) {
		t.Fatal("made after: not closed")
	}
	if (&Permit{}).Lost() != nil {
		t.Fatal("a permit that does not renew has a Lost channel")
	}
}
