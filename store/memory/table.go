package memory

import (
	"strings"

	"github.com/sluicehq/sluice/algo"
)

// table holds a shard's keys: a map from a key's 64-bit hash (the one
// that picked the shard) to its entry, so that a decision hashes its key
// once and the map compares integers, not strings. Keys whose hashes
// collide share a chain.
type table map[uint64]*entry

type entry struct {
	key  string
	st   algo.State
	next *entry // another key with the same hash
}

// get returns the state of key, whose hash is h, or nil.
func (t table) get(h uint64, key string) *algo.State {
	for e := t[h]; e != nil; e = e.next {
		if e.key == key {
			return &e.st
		}
	}
	return nil
}

// put adds key, which the table does not hold, with state st, and returns
// the state's place. The table keeps its own copy of key, so that the
// caller's string does not escape.
func (t table) put(h uint64, key string, st algo.State) *algo.State {
	e := &entry{key: strings.Clone(key), st: st, next: t[h]}
	t[h] = e
	return &e.st
}

// del forgets key.
func (t table) del(h uint64, key string) {
	p := t[h]
	if p == nil {
		return
	}
	if p.key == key {
		if p.next == nil {
			delete(t, h)
		} else {
			t[h] = p.next
		}
		return
	}
	for ; p.next != nil; p = p.next {
		if p.next.key == key {
			p.next = p.next.next
			return
		}
	}
}

// len returns the number of keys.
func (t table) len() int {
	n := 0
	for _, e := range t {
		for ; e != nil; e = e.next {
			n++
		}
	}
	return n
}

// sweep forgets every key whose state expires at or before now.
func (t table) sweep(now int64) {
	for h, e := range t {
		var keep *entry
		for e != nil {
			next := e.next
			if e.st.Expire > now {
				e.next, keep = keep, e
			}
			e = next
		}
		if keep == nil {
			delete(t, h)
		} else {
			t[h] = keep
		}
	}
}

// clone returns a new table with the same entries, sized for them: the
// old one's memory goes back with it.
func (t table) clone() table {
	n := make(table, len(t))
	for h, e := range t {
		n[h] = e
	}
	return n
}
