package memory

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/algo"
)

// An entry is one key's state. Its own lock guards st and dead, so that
// decisions on one key wait only for each other, and a decision holds it
// for the algorithm's step alone. h and key never change.
//
// An entry is 128 bytes, which the allocator places at a multiple of 128:
// the first cache line holds all a decision writes (the lock and the state
// but for a log's length) and the hash it compares, so that decisions on
// one key from several cores pass one line between them; the second holds
// the key and a sliding log's or window counter's length: for the other
// algorithms only the entry's creation writes it (see algo.State.Clear).
// The padding keeps the size class at 128 (TestEntryLayout).
type entry struct {
	mu   sync.Mutex
	dead bool // removed from its shard: a holder looks the key up again
	h    uint64
	st   algo.State
	key  string
	_    [128 - 120]byte
}

// An index is a shard's open-addressing hash table of entries (linear
// probing on the key's hash, at most half full), read without locks:
// cells are atomic, and every change is made under the shard's lock. A
// reader that misses a key, or finds its entry dead, looks again under the
// shard's lock (see Store.apply), so a change in flight can only send a
// reader the slow way, never to another key's state.
type index struct {
	cells []atomic.Pointer[entry]
	mask  uint64
	n     int // entries; under the shard's lock
}

// minCells is the size of a new index, and the least an index shrinks to.
const minCells = 8

func newIndex(cells int) *index {
	return &index{cells: make([]atomic.Pointer[entry], cells), mask: uint64(cells - 1)}
}

// home is where the probe for hash h starts; the low bits of h pick the
// shard, so the index uses the ones above them.
func (x *index) home(h uint64) uint64 { return (h >> shardBits) & x.mask }

// find returns key's entry, or nil. It takes no lock.
func (x *index) find(h uint64, key string) *entry {
	for i := x.home(h); ; i = (i + 1) & x.mask {
		e := x.cells[i].Load()
		if e == nil {
			return nil
		}
		if e.h == h && e.key == key {
			return e
		}
	}
}

// add places e, which the index does not hold and has room for.
func (x *index) add(e *entry) {
	i := x.home(e.h)
	for x.cells[i].Load() != nil {
		i = (i + 1) & x.mask
	}
	x.cells[i].Store(e)
	x.n++
}

// remove takes e out, moving the entries after it in its probe run back
// so that every remaining entry stays reachable from its home.
func (x *index) remove(e *entry) {
	i := x.home(e.h)
	for x.cells[i].Load() != e {
		i = (i + 1) & x.mask
	}
	for j := i; ; {
		j = (j + 1) & x.mask
		f := x.cells[j].Load()
		if f == nil {
			break
		}
		// f may move to the hole at i unless its home lies cyclically in
		// (i, j].
		if k := x.home(f.h); (i < j && i < k && k <= j) || (j < i && (i < k || k <= j)) {
			continue
		}
		x.cells[i].Store(f)
		i = j
	}
	x.cells[i].Store(nil)
	x.n--
}

// resized returns a new index of the given size holding x's live entries.
func (x *index) resized(cells int) *index {
	y := newIndex(cells)
	for i := range x.cells {
		if e := x.cells[i].Load(); e != nil && !e.dead {
			y.add(e)
		}
	}
	return y
}

// cellsFor is the index size for n entries: at most half full.
func cellsFor(n int) int {
	s := minCells
	for s < 2*n {
		s *= 2
	}
	return s
}

func newEntry(h uint64, key string, st algo.State) *entry {
	// The entry keeps its own copy of key, so that the caller's string
	// does not escape.
	return &entry{h: h, st: st, key: strings.Clone(key)}
}
