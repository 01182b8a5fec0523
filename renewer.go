package sluice

import (
	"context"
	"sync"
	"time"
)

// A Limiter has renewers renewers, and a permit's is the one of the pooled
// plan its acquire used (opPlan), so that acquires and releases on several
// cores seldom meet on one lock, nor on the cache line of one.
// Each runs at most maxRenewing renewals at once, each on a goroutine of
// its own that ends with it: a store that hangs delays the others no more
// than this allows (64 renewals a Limiter).
const (
	renewers    = 8
	maxRenewing = 8
)

// paddedRenewer is a renewer alone on its cache lines: renewers side by
// side would share one, and its lock would bounce between cores anyway.
type paddedRenewer struct {
	renewer
	_ [128]byte
}

// A renewer renews the holds of some of a Limiter's permits: one
// goroutine, which runs while any of them is held, so that a held slot
// costs no goroutine and no timer of its own. Time is cut into epochs of
// a sixth of the hold; a permit goes into the bucket of the epoch it was
// acquired or renewed in, and a bucket is renewed when its epoch is two
// behind: between a sixth and a third of the hold after the permit's last
// renewal. Adding a permit so reads no clock and sorts nothing. A permit
// is lost when a renewal finds it gone, or when none succeeded for a
// whole hold.
type renewer struct {
	mu       sync.Mutex
	hold     time.Duration   // the limit's HoldFor
	buckets  [3]*permitState // by epoch mod 3: lists of permits, linked by prev and next
	epoch    uint64
	epochAt  time.Time // when the epoch began
	running  bool
	inFlight int           // renewals in flight: their permits are in no bucket
	slots    chan struct{} // renewals in flight, at most maxRenewing
}

// add schedules p's renewals. p.last becomes the epoch's start, no later
// than the acquire: a store that fails then loses p no later than its hold
// would end.
func (rn *renewer) add(p *permitState, hold time.Duration) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if !rn.running {
		if rn.slots == nil {
			rn.slots = make(chan struct{}, maxRenewing)
		}
		rn.running, rn.hold, rn.epochAt = true, hold, time.Now()
		go rn.run()
	}
	p.last = rn.epochAt
	rn.push(p)
}

// remove stops p's renewals. The caller holds p.mu, so none is in flight:
// renew puts p back only while it holds p.mu.
func (rn *renewer) remove(p *permitState) {
	rn.mu.Lock()
	rn.unlink(p)
	rn.mu.Unlock()
}

// push puts p in the current epoch's bucket; rn.mu is held.
func (rn *renewer) push(p *permitState) {
	b := rn.epoch % 3
	p.bucket, p.prev, p.next = int8(b), nil, rn.buckets[b]
	if p.next != nil {
		p.next.prev = p
	}
	rn.buckets[b] = p
}

// unlink takes p out of its bucket, if it is in one; rn.mu is held.
func (rn *renewer) unlink(p *permitState) {
	if p.bucket < 0 {
		return
	}
	if p.prev != nil {
		p.prev.next = p.next
	} else {
		rn.buckets[p.bucket] = p.next
	}
	if p.next != nil {
		p.next.prev = p.prev
	}
	p.bucket, p.prev, p.next = -1, nil, nil
}

// run starts an epoch every sixth of the hold and renews the bucket two
// epochs behind, until no permit is held.
func (rn *renewer) run() {
	tick := time.NewTicker(rn.hold / 6)
	defer tick.Stop()
	for range tick.C {
		rn.mu.Lock()
		if rn.buckets == [3]*permitState{} && rn.inFlight == 0 {
			rn.running = false
			rn.mu.Unlock()
			return
		}
		rn.epoch++
		rn.epochAt = time.Now()
		due := int((rn.epoch + 1) % 3) // epoch-2's: no permit joins it now
		rn.mu.Unlock()
		rn.renewAll(due)
	}
}

// renewAll starts the renewal of every permit in bucket b, at most
// maxRenewing at once.
func (rn *renewer) renewAll(b int) {
	for {
		rn.mu.Lock()
		p := rn.buckets[b]
		if p == nil {
			rn.mu.Unlock()
			return
		}
		rn.unlink(p)
		if !p.mu.TryLock() { // RenewAt or Release in flight: try next time
			rn.push(p)
			rn.mu.Unlock()
			continue
		}
		rn.inFlight++ // p.mu held until the renewal ends: Release waits for it
		rn.mu.Unlock()
		rn.slots <- struct{}{}
		go rn.renew(p)
	}
}

// renew renews p once, then schedules its next renewal or marks it lost.
func (rn *renewer) renew(p *permitState) {
	defer func() { <-rn.slots }()
	ctx, cancel := context.WithTimeout(context.Background(), rn.hold/3)
	held, err := p.renew(ctx, time.Time{})
	cancel()
	now := time.Now()
	rn.mu.Lock()
	rn.inFlight--
	lost := false
	switch {
	case err == nil && held:
		p.last = now
		rn.push(p)
	case err == nil || now.Sub(p.last) >= rn.hold:
		lost = true
	default: // the store failed: try again in a later epoch
		rn.push(p)
	}
	rn.mu.Unlock()
	if lost {
		p.markLost() // before p.mu is let go: a release may then reuse p
	}
	p.mu.Unlock()
}
