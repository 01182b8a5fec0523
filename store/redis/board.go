package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/store"
)

var _ store.Board = (*Store)(nil)

var boardScript = embeddedScript("board.lua")

// boardKeys are the board's hash and generation counter, in one hash slot.
func (s *Store) boardKeys() []string {
	return []string{s.prefix + "{%board}", s.prefix + "{%board}:gen"}
}

// Post implements store.Board: scripts/board.lua sets the entry and moves
// the generation on, in one call.
func (s *Store) Post(ctx context.Context, name string, value []byte) error {
	if err := store.ValidatePost(name, value); err != nil {
		return err
	}
	ctx, cancel, c, err := s.boundedCall(ctx)
	defer cancel()
	if err != nil {
		return err
	}
	del := ""
	if value == nil {
		del = "del"
	}
	err = boardScript.Exec(ctx, c, s.boardKeys(), []string{"post", name, string(value), del, strconv.Itoa(store.MaxBoardEntries)}).Error()
	if err != nil {
		return fmt.Errorf("redis store: post to the board: %w", err)
	}
	return nil
}

// Read implements store.Board: the generation (and the entries) as of one
// moment, with Redis TIME.
func (s *Store) Read(ctx context.Context, all bool) (store.BoardState, error) {
	ctx, cancel, c, err := s.boundedCall(ctx)
	defer cancel()
	if err != nil {
		return store.BoardState{}, err
	}
	mode := ""
	if all {
		mode = "all"
	}
	msgs, err := boardScript.Exec(ctx, c, s.boardKeys(), []string{"read", mode}).ToArray()
	if err != nil || len(msgs) < 3 {
		return store.BoardState{}, fmt.Errorf("redis store: read the board: %v %w", msgs, err)
	}
	num := func(m rueidis.RedisMessage) int64 { v, _ := m.AsInt64(); return v }
	st := store.BoardState{Gen: num(msgs[0]), Time: time.Unix(num(msgs[1]), num(msgs[2])*1000)}
	if all {
		st.Entries = make(map[string][]byte, (len(msgs)-3)/2)
		for i := 3; i+1 < len(msgs); i += 2 {
			k, _ := msgs[i].ToString()
			v, _ := msgs[i+1].ToString()
			st.Entries[k] = []byte(v)
		}
	}
	return st, nil
}
