// Package permitid draws permit ids (algo.Concurrency) from crypto/rand:
// ids that another caller cannot guess, so that only a permit's holder
// can renew or release its slots.
package permitid

import (
	"crypto/rand"
	"encoding/binary"
	"sync"

	"github.com/sluicehq/sluice/algo"
)

// A Source hands out ids from crypto/rand's bytes, 64 ids to a read, each
// byte used once: a read of crypto/rand does a compare-and-swap on one
// word that every core shares (Go 1.26's crypto/internal/sysrand), which
// acquires on several cores would contend for if each id read it. A
// Source is for one goroutine at a time; its zero value is ready.
type Source struct {
	buf  [64 * 8]byte
	left int // bytes not yet used, at the start of buf
}

// Next returns a random id, 1 to algo.MaxPermitID.
func (s *Source) Next() int64 {
	for {
		if s.left == 0 {
			rand.Read(s.buf[:]) // does not fail (Go 1.24+)
			s.left = len(s.buf)
		}
		s.left -= 8
		if id := int64(binary.LittleEndian.Uint64(s.buf[s.left:]) & algo.MaxPermitID); id != 0 {
			return id
		}
	}
}

var sources = sync.Pool{New: func() any { return new(Source) }}

// New returns a random id, 1 to algo.MaxPermitID, from a pooled Source.
func New() int64 {
	s := sources.Get().(*Source)
	defer sources.Put(s)
	return s.Next()
}
