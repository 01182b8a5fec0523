package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

var _ store.Settler = (*Store)(nil)

var settleScript = embeddedScript("expire.lua", "window_counter.lua", "sliding_log.lua", "change.lua", "settle.lua")

// ticketKey is the Redis key of a ticket: in its tag's slot, and apart from
// every state key ("%:", which no escaped key holds).
func (s *Store) ticketKey(t store.Request) string {
	return keyName(s.prefix, t.Key, t.Tag) + "%:ticket"
}

// Issue implements store.Settler: the ticket is a key that expires after
// ttl by Redis's clock.
func (s *Store) Issue(ctx context.Context, t store.Request, ttl time.Duration) error {
	if err := store.ValidateTicket(t, ttl); err != nil {
		return err
	}
	ctx, cancel, c, err := s.boundedCall(ctx)
	defer cancel()
	if err != nil {
		return err
	}
	if err := c.Do(ctx, c.B().Set().Key(s.ticketKey(t)).Value("1").Px(ttl).Build()).Error(); err != nil {
		return fmt.Errorf("redis store: issue a ticket: %w", err)
	}
	return nil
}

// Settle implements store.Settler: scripts/settle.lua takes the ticket,
// makes the changes (change.lua) and, for a reward, tells the over-limit
// caches, in one call. On a Cluster whose keys lie in several slots it
// takes the ticket first, then changes each key (a failure between leaves
// the estimate counted, never more).
func (s *Store) Settle(ctx context.Context, t store.Request, reqs []store.Request, op algo.Adjust) (bool, error) {
	if err := store.ValidateTicket(t, store.MinTicket); err != nil {
		return false, err
	}
	keys := []string{s.ticketKey(t), ""}
	args := []string{"", "", ""}
	if !t.Time.IsZero() {
		args[0] = itoa(t.Time.UnixMicro())
	}
	for i := range reqs {
		r := reqs[i]
		r.Time = t.Time
		code, a, err := adjustArgs(&r, op)
		if err != nil {
			return false, fmt.Errorf("request %d: %w", i, err)
		}
		keys = append(keys, s.stateKey(r))
		args = append(append(args, code, itoa(int64(len(a)))), a...)
	}
	ctx, cancel, c, err := s.boundedCall(ctx)
	defer cancel()
	if err != nil {
		return false, err
	}
	channel, gen := s.forgetNames()
	keys[1] = gen
	if s.client().Mode() == rueidis.ClientModeCluster {
		if len(slotGroups(append([]string{keys[0]}, keys[2:]...))) > 1 {
			return s.settleAcrossSlots(ctx, t, reqs, op)
		}
		keys[1] = keys[0] // the forget goes apart, from its own slot
	} else if op == algo.Reward {
		names := make([]string, len(reqs))
		for i, r := range reqs {
			names[i] = r.Key
		}
		payload, _ := json.Marshal(names)
		args[1], args[2] = channel, string(payload)
	}
	n, err := settleScript.Exec(ctx, c, keys, args).AsInt64()
	if err != nil {
		return false, fmt.Errorf("redis store: settle: %w", err)
	}
	if n == 0 {
		return false, nil
	}
	s.forgetHere(reqs...)
	if op == algo.Reward && args[1] == "" {
		return true, s.forget(ctx, reqs...)
	}
	return true, nil
}

// settleAcrossSlots settles on a Cluster whose keys lie in several slots:
// the ticket is taken, then each key changed.
func (s *Store) settleAcrossSlots(ctx context.Context, t store.Request, reqs []store.Request, op algo.Adjust) (bool, error) {
	c, err := s.clientOrErr()
	if err != nil {
		return false, err
	}
	n, err := c.Do(ctx, c.B().Del().Key(s.ticketKey(t)).Build()).AsInt64()
	if err != nil || n == 0 {
		return false, err
	}
	for _, r := range reqs {
		r.Time = t.Time
		if err := s.Adjust(ctx, r, op); err != nil {
			return true, err
		}
	}
	return true, nil
}
