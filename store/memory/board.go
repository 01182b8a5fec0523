package memory

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/sluicehq/sluice/store"
)

var _ store.Board = (*Store)(nil)

// board is the store's Board: its entries and generation.
type board struct {
	mu      sync.Mutex
	gen     int64
	entries map[string][]byte
}

// Post implements store.Board.
func (s *Store) Post(_ context.Context, name string, value []byte) error {
	if err := store.ValidatePost(name, value); err != nil {
		return err
	}
	b := &s.board
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.entries == nil {
		b.entries = map[string][]byte{}
	}
	if value == nil {
		delete(b.entries, name)
	} else {
		if _, ok := b.entries[name]; !ok && len(b.entries) >= store.MaxBoardEntries {
			return fmt.Errorf("memory store: %w: the board holds %d entries, the most it keeps", store.ErrBadRequest, store.MaxBoardEntries)
		}
		b.entries[name] = append([]byte(nil), value...)
	}
	b.gen++
	return nil
}

// Read implements store.Board.
func (s *Store) Read(_ context.Context, all bool) (store.BoardState, error) {
	b := &s.board
	b.mu.Lock()
	defer b.mu.Unlock()
	st := store.BoardState{Gen: b.gen, Time: time.UnixMicro(s.now())}
	if all {
		st.Entries = maps.Clone(b.entries)
		if st.Entries == nil {
			st.Entries = map[string][]byte{}
		}
	}
	return st, nil
}
