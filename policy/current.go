package policy

import "sync/atomic"

// Current is the policy in force, for concurrent readers, replaced
// atomically (a reload: Load the file, then Store the policy if it is
// valid). Readers that loaded the old policy keep using it, unchanged,
// until they load again. The zero Current holds nil, which matches
// nothing.
type Current struct {
	p atomic.Pointer[Policy]
}

// NewCurrent returns a Current of p.
func NewCurrent(p *Policy) *Current {
	h := new(Current)
	h.p.Store(p)
	return h
}

// Load returns the current policy.
func (h *Current) Load() *Policy { return h.p.Load() }

// Store makes p the current policy.
func (h *Current) Store(p *Policy) { h.p.Store(p) }
