package policy

import "sync/atomic"

// Current is the policy in force, for concurrent readers, replaced
// atomically (a reload). Readers that loaded the old policy keep using it, unchanged,
// until they load again. The zero Current holds nil, which matches nothing.
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

// Reload loads the policy file at path and makes it the current policy. If
// the file cannot be read or is invalid, the current policy stays and the
// error is returned.
func (h *Current) Reload(path string) error {
	p, err := Load(path)
	if err != nil {
		return err
	}
	h.p.Store(p)
	return nil
}
