package renewal

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// permit is a Permit whose renewals answer what its test says (answer, by
// the renewal's number from 1), and keep their since.
type permit struct {
	sync.Mutex
	answer  func(n int) (bool, error)
	sinces  []time.Time // under the lock, as Renew runs
	renewed atomic.Int32
	lost    atomic.Int32
	e       Entry
}

func (p *permit) Renew(since time.Time) (bool, error) {
	p.sinces = append(p.sinces, since)
	return p.answer(int(p.renewed.Add(1)))
}

func (p *permit) MarkLost() { p.lost.Add(1) }

// stop stops renewing each of ps, as a release does: under its lock.
func stop(ps ...*permit) {
	for _, p := range ps {
		p.Lock()
		p.e.Stop()
		p.Unlock()
	}
}

// TestRenewalOutcomes: a permit renewed is renewed again, its since then
// the renewal's time; one whose store fails is tried again, its since
// still Add's epoch, until a renewal holds; one whose slots are gone is
// marked lost once and renewed no more. Stopped, the renewer renews none.
func TestRenewalOutcomes(t *testing.T) {
	var rn Renewer
	held := func(int) (bool, error) { return true, nil }
	ok := &permit{answer: held}
	flaky := &permit{answer: func(n int) (bool, error) {
		if n <= 3 {
			return false, errors.New("store down")
		}
		return true, nil
	}}
	gone := &permit{answer: func(int) (bool, error) { return false, nil }}
	for _, p := range []*permit{ok, flaky, gone} {
		rn.Add(&p.e, p, 6*time.Millisecond)
	}
	for ok.renewed.Load() < 3 || flaky.renewed.Load() < 5 || gone.lost.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	stop(ok, flaky)
	if s := ok.sinces; !s[1].After(s[0]) || !s[2].After(s[1]) {
		t.Errorf("a renewal that held did not move since: %v", s)
	}
	if s := flaky.sinces; !s[1].Equal(s[0]) || !s[2].Equal(s[0]) || !s[3].Equal(s[0]) || !s[4].After(s[3]) {
		t.Errorf("failed renewals moved since, or one that held did not: %v", s)
	}
	if !flaky.sinces[0].Equal(ok.sinces[0]) {
		t.Errorf("permits added in one epoch start at %v and %v", flaky.sinces[0], ok.sinces[0])
	}
	if n := rn.Len(); n != 0 {
		t.Fatalf("stopped and lost, %d permits still renewed", n)
	}
	if ok.lost.Load() != 0 || flaky.lost.Load() != 0 || gone.lost.Load() != 1 || gone.renewed.Load() != 1 {
		t.Fatalf("marked lost: ok %d, flaky %d, gone %d (renewed %d); want 0, 0, 1 (1)", ok.lost.Load(), flaky.lost.Load(), gone.lost.Load(), gone.renewed.Load())
	}
}

// TestRenewingBounded: renewals that hang (as on a store that does) run
// at most maxRenewing at once; a permit whose lock is taken (an op of its
// own in flight) is not renewed until it is let go; every permit is
// renewed in the end, and the renewer starts again after it stopped.
func TestRenewingBounded(t *testing.T) {
	var rn Renewer
	var running, most atomic.Int32
	unblock := make(chan struct{})
	hang := func(int) (bool, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-unblock
		return true, nil
	}
	ps := make([]*permit, 30)
	for i := range ps {
		ps[i] = &permit{answer: hang}
	}
	busy := ps[0]
	busy.Lock()
	for _, p := range ps {
		rn.Add(&p.e, p, 6*time.Millisecond)
	}
	for most.Load() < maxRenewing {
		time.Sleep(time.Millisecond)
	}
	close(unblock)
	for _, p := range ps[1:] {
		for p.renewed.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if busy.renewed.Load() != 0 {
		t.Fatal("a permit whose lock is taken was renewed")
	}
	busy.Unlock()
	for busy.renewed.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if m := most.Load(); m != maxRenewing {
		t.Fatalf("%d renewals ran at once, want at most (and, hanging, exactly) %d", m, maxRenewing)
	}
	stop(ps...)
	for rn.mu.Lock(); rn.running; rn.mu.Lock() { // until its timer finds none to renew
		rn.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	rn.mu.Unlock()
	p := &permit{answer: func(int) (bool, error) { return true, nil }}
	rn.Add(&p.e, p, 6*time.Millisecond)
	for p.renewed.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	stop(p)
}
