package sluice

import (
	"context"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store/memory"
)

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
	before := Permit{s: &permitState{renewing: true}}
	c := before.Lost()
	if closed(c) {
		t.Fatal("closed before it was lost")
	}
	before.s.MarkLost()
	before.s.MarkLost()
	if !closed(c) || before.Lost() != c {
		t.Fatal("made before: not closed when lost")
	}
	after := Permit{s: &permitState{renewing: true}}
	after.s.MarkLost()
	if !closed(after.Lost()) {
		t.Fatal("made after: not closed")
	}
	if (Permit{s: &permitState{}}).Lost() != nil || (Permit{}).Lost() != nil {
		t.Fatal("a permit that does not renew has a Lost channel")
	}
}

// TestRenewerOfThePooledPlan: permits acquired on many goroutines (so on
// pooled plans of several renewers) are each in the buckets of the
// renewer they name, and a release, in any order, takes a permit out of
// that renewer: after half are released, the renewers hold exactly the
// other half; after all, nothing.
func TestRenewerOfThePooledPlan(t *testing.T) {
	st := memory.New()
	defer st.Close()
	lim, err := NewLimiter(st, algo.Concurrency{Count: 100, HoldFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan Permit, 100*100)
	var wg sync.WaitGroup
	for g := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				p, err := lim.Acquire(context.Background(), strconv.Itoa(g))
				if err != nil {
					t.Error(err)
					return
				}
				held <- p
			}
		}()
	}
	wg.Wait()
	close(held)
	var permits []Permit
	for p := range held {
		permits = append(permits, p)
	}
	// inRenewers checks that the renewers hold exactly want, each renewer
	// the permits that name it.
	inRenewers := func(want []Permit) {
		t.Helper()
		var named [renewers]int
		for _, p := range want {
			named[p.s.renewer]++
		}
		for i := range lim.renewers {
			if n := lim.renewers[i].Len(); n != named[i] {
				t.Fatalf("renewer %d renews %d permits; %d held name it", i, n, named[i])
			}
		}
	}
	inRenewers(permits)
	mrand.Shuffle(len(permits), func(i, j int) { permits[i], permits[j] = permits[j], permits[i] })
	for i, p := range permits {
		if i == len(permits)/2 {
			inRenewers(permits[i:])
		}
		if err := p.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	inRenewers(nil)
}

// TestSpentCopiesDoNothing: a released Permit's state goes to a later
// acquire; the released Permit's copies then do nothing with it: a
// release frees none of the new permit's slots, a renewal reports false,
// Lost is nil, and the new permit stays with its renewer, its Lost
// channel open.
func TestSpentCopiesDoNothing(t *testing.T) {
	st := memory.New()
	defer st.Close()
	ctx := context.Background()
	lim, err := NewLimiter(st, algo.Concurrency{Count: 1, HoldFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var spent, p Permit
	for i := 0; p.s == nil; i++ { // a sync.Pool may drop the plan a state went to (under -race)
		if i == 100 {
			t.Fatal("no state given to a later acquire in 100 pairs")
		}
		a, err := lim.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		c := a
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		b, err := lim.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if b.s == c.s {
			spent, p = c, b
		} else if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := spent.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if held, err := spent.RenewAt(ctx, time.Time{}); held || err != nil {
		t.Fatalf("a spent permit renewed: %v, %v", held, err)
	}
	if spent.Lost() != nil {
		t.Fatal("a spent permit has a Lost channel")
	}
	if x, err := lim.AcquireAt(ctx, "k", time.Time{}, 1); err != nil || x.OK() {
		t.Fatalf("a spent copy's release freed the new permit's slot: %+v, %v", x.Result(), err)
	}
	if lim.renewers[p.s.renewer].Len() != 1 {
		t.Fatal("the new permit left its renewer")
	}
	select {
	case <-p.Lost():
		t.Fatal("the new permit is lost")
	default:
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if x, err := lim.AcquireAt(ctx, "k", time.Time{}, 1); err != nil || !x.OK() {
		t.Fatalf("after the new permit's release: %+v, %v", x.Result(), err)
	}
}
