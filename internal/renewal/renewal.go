// Package renewal renews held concurrency slots in the background: a
// Limiter's permits (sluice.Permit) and the middleware's requests
// (httplimit), many to a Renewer, so that a held slot costs no goroutine
// and no timer of its own.
package renewal

import (
	"sync"
	"time"
)

// maxRenewing is how many renewals a Renewer runs at once, each on a
// goroutine that ends with it: a store that hangs delays the others no
// more than this allows.
const maxRenewing = 8

// A Permit is what a Renewer renews: the slots held under one permit id.
// Its lock is held while an op of its own is in the store; a renewal takes
// it by TryLock (one that finds it taken waits for a later epoch) and
// lets it go once Renew, and MarkLost if the slots are gone, return.
type Permit interface {
	TryLock() bool
	Unlock()
	// Renew renews the hold once: held is false when the slots are gone;
	// err, a store's failure, is tried again later. since is the last
	// renewal that held, or a time no later than Add.
	Renew(since time.Time) (held bool, err error)
	// MarkLost is told that the slots are gone; the permit is no longer
	// renewed.
	MarkLost()
}

// An Entry is a permit's place in a Renewer; the permit's state holds it.
type Entry struct {
	p          Permit
	rn         *Renewer  // renewing it, or nil
	last       time.Time // the last renewal that held, or Add's epoch
	prev, next *Entry    // in rn's bucket
	bucket     int8      // 1 + the bucket it is in, 0 in none (in flight)
}

// A Renewer renews the holds of permits of one hold (HoldFor) on a timer
// while it renews any. Time is cut into epochs of a sixth of the hold; a
// permit goes into the bucket of the epoch it was added or renewed in, and
// a bucket is renewed when its epoch is two behind: between a sixth and a
// third of the hold after the permit's last renewal. Adding a permit so
// reads no clock and sorts nothing. The zero Renewer is ready to use.
type Renewer struct {
	mu       sync.Mutex
	hold     time.Duration
	buckets  [3]*Entry // by epoch mod 3, linked by prev and next
	epoch    uint64
	epochAt  time.Time // when the epoch began
	n        int       // the permits renewed: in a bucket, or in flight
	running  bool      // t is set, or tick runs
	t        *time.Timer
	inFlight chan struct{} // renewals in flight, at most maxRenewing
}

// Add starts renewing p, whose Entry is e, by hold (every permit's of rn).
// Its since starts at the epoch's start, no later than the acquire: a
// store's failures cannot outlast its hold unseen.
func (rn *Renewer) Add(e *Entry, p Permit, hold time.Duration) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if !rn.running {
		rn.running, rn.hold, rn.epochAt = true, hold, time.Now()
		if rn.t == nil {
			rn.inFlight = make(chan struct{}, maxRenewing)
			rn.t = time.AfterFunc(hold/6, rn.tick)
		} else {
			rn.t.Reset(hold / 6)
		}
	}
	rn.n++
	e.p, e.rn, e.last = p, rn, rn.epochAt
	rn.push(e)
}

// Stop stops renewing e. The caller holds its permit's lock, so no
// renewal is in flight, and none starts after.
func (e *Entry) Stop() {
	if rn := e.rn; rn != nil {
		rn.mu.Lock()
		rn.unlink(e)
		rn.n--
		e.rn = nil
		rn.mu.Unlock()
	}
}

// Len is how many permits rn renews.
func (rn *Renewer) Len() int {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return rn.n
}

// push puts e in the current epoch's bucket; rn.mu is held.
func (rn *Renewer) push(e *Entry) {
	b := rn.epoch % 3
	e.bucket, e.prev, e.next = int8(b+1), nil, rn.buckets[b]
	if e.next != nil {
		e.next.prev = e
	}
	rn.buckets[b] = e
}

// unlink takes e out of its bucket, if it is in one; rn.mu is held.
func (rn *Renewer) unlink(e *Entry) {
	if e.bucket == 0 {
		return
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		rn.buckets[e.bucket-1] = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	}
	e.bucket, e.prev, e.next = 0, nil, nil
}

// tick starts an epoch and renews the bucket two epochs behind, then sets
// the timer for the next, until no permit is renewed.
func (rn *Renewer) tick() {
	rn.mu.Lock()
	if rn.n == 0 {
		rn.running = false // the next Add sets the timer again
		rn.mu.Unlock()
		return
	}
	rn.epoch++
	rn.epochAt = time.Now()
	due := int((rn.epoch + 1) % 3) // epoch-2's: no permit joins it now
	rn.mu.Unlock()
	for {
		rn.mu.Lock()
		e := rn.buckets[due]
		if e == nil {
			rn.mu.Unlock()
			break
		}
		rn.unlink(e)
		if !e.p.TryLock() { // an op of its own in flight: next time
			rn.push(e)
			rn.mu.Unlock()
			continue
		}
		rn.mu.Unlock() // in flight: its lock held until the renewal ends
		rn.inFlight <- struct{}{}
		go rn.renew(e)
	}
	rn.t.Reset(rn.hold / 6) // rn.hold changes only while !running
}

// renew renews e once, then schedules its next renewal or marks it lost.
func (rn *Renewer) renew(e *Entry) {
	defer func() { <-rn.inFlight }()
	held, err := e.p.Renew(e.last)
	now := time.Now()
	rn.mu.Lock()
	lost := err == nil && !held
	switch {
	case lost:
		rn.n--
		e.rn = nil
	case err == nil:
		e.last = now
		fallthrough
	default: // a store's failure too: tried again in a later epoch
		rn.push(e)
	}
	rn.mu.Unlock()
	if lost {
		e.p.MarkLost() // before the lock is let go: a release may then reuse it
	}
	e.p.Unlock()
}
