package sluice

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// maxRenewing bounds the renewals a Limiter runs at once, each on a
// goroutine of its own that ends with it: a store that hangs delays the
// others no more than this allows.
const maxRenewing = 64

// A renewer renews the holds of a Limiter's permits: one goroutine, which
// runs while any permit is held and sleeps until the earliest is due, so
// that a held slot costs no goroutine and no timer of its own. A permit is
// due every third of its HoldFor; it is lost when a renewal finds it gone,
// or when none succeeded for a whole HoldFor.
type renewer struct {
	mu       sync.Mutex
	due      permitHeap
	wake     chan struct{} // a permit was added: the earliest may be sooner
	running  bool
	inFlight int           // renewals in flight: their permits are out of due
	slots    chan struct{} // renewals in flight, at most maxRenewing
}

// add schedules p's renewals, the first a third of hold from now.
func (rn *renewer) add(p *Permit, hold time.Duration) {
	now := time.Now()
	rn.mu.Lock()
	if rn.wake == nil {
		rn.wake, rn.slots = make(chan struct{}, 1), make(chan struct{}, maxRenewing)
	}
	p.hold, p.last, p.next = hold, now, now.Add(hold/3)
	heap.Push(&rn.due, p)
	start := !rn.running
	rn.running = true
	rn.mu.Unlock()
	if start {
		go rn.run()
	} else {
		select {
		case rn.wake <- struct{}{}:
		default:
		}
	}
}

// remove stops p's renewals, and waits for one in flight to end.
func (rn *renewer) remove(p *Permit) {
	rn.mu.Lock()
	if p.index >= 0 {
		heap.Remove(&rn.due, p.index)
	}
	p.stopped = true
	last := len(rn.due) == 0
	rn.mu.Unlock()
	if last { // the loop may end
		select {
		case rn.wake <- struct{}{}:
		default:
		}
	}
	p.renewMu.Lock() // a renewal in flight holds it
	p.renewMu.Unlock()
}

// run renews the permits as they come due, until none is held.
func (rn *renewer) run() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		rn.mu.Lock()
		if len(rn.due) == 0 && rn.inFlight == 0 {
			rn.running = false
			rn.mu.Unlock()
			return
		}
		wait := time.Hour // only renewals in flight: wait for them
		if len(rn.due) > 0 {
			wait = time.Until(rn.due[0].next)
		}
		if wait > 0 {
			rn.mu.Unlock()
			t.Reset(wait)
			select {
			case <-t.C:
			case <-rn.wake:
				t.Stop() // Go 1.23 timers: no stale tick to drain
			}
			continue
		}
		p := heap.Pop(&rn.due).(*Permit)
		p.renewMu.Lock() // held until the renewal ends: remove waits for it
		rn.inFlight++
		rn.mu.Unlock()
		rn.slots <- struct{}{}
		go rn.renew(p)
	}
}

// renew renews p once, then schedules its next renewal or marks it lost.
func (rn *renewer) renew(p *Permit) {
	defer func() { <-rn.slots }()
	ctx, cancel := context.WithTimeout(context.Background(), p.hold/3)
	held, err := p.RenewAt(ctx, time.Time{})
	cancel()
	now := time.Now()
	rn.mu.Lock()
	rn.inFlight--
	lost := false
	switch {
	case p.stopped:
	case err == nil && held:
		p.last, p.next = now, now.Add(p.hold/3)
		heap.Push(&rn.due, p)
	case err == nil || now.Sub(p.last) >= p.hold:
		lost = true
	default: // the store failed: try again a third of hold on
		p.next = now.Add(p.hold / 3)
		heap.Push(&rn.due, p)
	}
	rn.mu.Unlock()
	p.renewMu.Unlock()
	if lost {
		p.lostOnce.Do(func() { close(p.lost) })
	}
	select {
	case rn.wake <- struct{}{}: // a permit went back: the loop looks again
	default:
	}
}

// permitHeap orders permits by their next renewal.
type permitHeap []*Permit

func (h permitHeap) Len() int           { return len(h) }
func (h permitHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h permitHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *permitHeap) Push(x any) {
	p := x.(*Permit)
	p.index = len(*h)
	*h = append(*h, p)
}
func (h *permitHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	p.index = -1
	*h = old[:len(old)-1]
	return p
}
