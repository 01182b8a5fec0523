package policy

import "sync/atomic"

// Holder holds the current policy for concurrent readers and replaces it
// atomically. Readers that loaded the old policy keep using it, unchanged,
// until they load again. The zero Holder holds nil, which matches nothing.
type Holder struct {
	p atomic.Pointer[Policy]
}

// NewHolder returns a Holder holding p.
func NewHolder(p *Policy) *Holder {
	h := new(Holder)
	h.p.Store(p)
	return h
}

// Load returns the current policy.
func (h *Holder) Load() *Policy { return h.p.Load() }

// Store makes p the current policy.
func (h *Holder) Store(p *Policy) { h.p.Store(p) }

// Reload loads the policy file at path and makes it the current policy. If
// the file cannot be read or is invalid, the current policy stays and the
// error is returned.
func (h *Holder) Reload(path string) error {
	p, err := Load(path)
	if err != nil {
		return err
	}
	h.p.Store(p)
	return nil
}
