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

var _ store.TicketQueue = (*Store)(nil)

var (
	settleScript  = embeddedScript("expire.lua", "window_counter.lua", "sliding_log.lua", "change.lua", "settle.lua")
	issueScript   = embeddedScript("issue.lua")
	dequeueScript = embeddedScript("dequeue.lua")
)

// ticketKey is the Redis key of a ticket: in its tag's hash slot, and apart from
// every state key ("%:", which no escaped key holds).
func (s *Store) ticketKey(t store.Request) string {
	return keyName(s.prefix, t.Key, t.Tag) + "%:ticket"
}

// ticketsKey is the Redis key of the tickets of t's tag (issue.lua), in
// the tag's hash slot.
func (s *Store) ticketsKey(t store.Request) string {
	return keyName(s.prefix, t.Tag, t.Tag) + "%:tickets"
}

// Issue implements store.Settler: scripts/issue.lua keeps the ticket, a
// key that expires after ttl by Redis's clock, and counts it among its
// tag's, which hold at most store.MaxOpenTickets.
func (s *Store) Issue(ctx context.Context, t store.Request, ttl time.Duration) error {
	if err := store.ValidateTicket(t, ttl); err != nil {
		return err
	}
	return s.issue(ctx, t, ttl, nil, "")
}

// queueKey is the Redis key of a ticket queue (store.TicketQueue), in its
// tag's hash slot.
func (s *Store) queueKey(q store.Request) string {
	return keyName(s.prefix, q.Key, q.Tag) + "%:queue"
}

// Enqueue implements store.TicketQueue: scripts/issue.lua keeps the
// ticket and queues the entry in one call.
func (s *Store) Enqueue(ctx context.Context, t, q store.Request, entry string, ttl time.Duration) error {
	if err := store.ValidateTicket(t, ttl); err != nil {
		return err
	}
	if err := store.ValidateQueue(q, entry, true); err != nil {
		return err
	}
	if q.Tag != t.Tag {
		return fmt.Errorf("redis store: %w: a queue placed apart from its ticket", store.ErrBadRequest)
	}
	return s.issue(ctx, t, ttl, &q, entry)
}

// Dequeue implements store.TicketQueue: scripts/dequeue.lua.
func (s *Store) Dequeue(ctx context.Context, q store.Request) (string, error) {
	if err := store.ValidateQueue(q, "", false); err != nil {
		return "", err
	}
	ctx, cancel, c, err := s.boundedCall(ctx)
	defer cancel()
	if err != nil {
		return "", err
	}
	now := ""
	if !q.Time.IsZero() {
		now = itoa(q.Time.UnixMicro())
	}
	entry, err := dequeueScript.Exec(ctx, c, []string{s.queueKey(q)}, []string{now}).ToString()
	if err != nil {
		return "", fmt.Errorf("redis store: dequeue: %w", err)
	}
	return entry, nil
}

// issue runs scripts/issue.lua: the ticket t, and with q the entry queued.
func (s *Store) issue(ctx context.Context, t store.Request, ttl time.Duration, q *store.Request, entry string) error {
	ctx, cancel, c, err := s.boundedCall(ctx)
	defer cancel()
	if err != nil {
		return err
	}
	now := ""
	if !t.Time.IsZero() {
		now = itoa(t.Time.UnixMicro())
	}
	keys := []string{s.ticketKey(t), s.ticketsKey(t)}
	args := []string{now, itoa(ttl.Microseconds()), itoa(store.MaxOpenTickets)}
	if q != nil {
		keys, args = append(keys, s.queueKey(*q)), append(args, entry)
	}
	n, err := issueScript.Exec(ctx, c, keys, args).AsInt64()
	switch {
	case err != nil:
		return fmt.Errorf("redis store: issue a ticket: %w", err)
	case n == 0:
		return fmt.Errorf("redis store: %w", store.ErrTooManyTickets)
	}
	return nil
}

// giveBackArgs returns change.lua's give-back op and its arguments for
// req, whose Time is when its estimate was counted (algo.Plan.GiveBack).
func giveBackArgs(req *store.Request) (string, []string, error) {
	if req.Time.IsZero() {
		return "", nil, fmt.Errorf("%w: a give-back without the time its estimate was counted at", store.ErrBadRequest)
	}
	since := req.Time.UnixMicro()
	code, args, err := adjustArgs(req, algo.Reward)
	if err != nil {
		return "", nil, err
	}
	code = code[:1] + "g"
	if code == "fg" {
		// A fixed window's: the end of since's window, and n.
		return code, []string{itoa(limitOf[algo.FixedWindow](req.Plan).WindowEnd(since)), itoa(req.Cost)}, nil
	}
	return code, append([]string{itoa(since)}, args...), nil
}

// Settle implements store.Settler: scripts/settle.lua takes the ticket,
// makes the changes (change.lua) and, for a reward, tells the over-limit
// caches, in one call. On a Cluster whose keys lie in several hash slots it
// takes the ticket first, then changes each key (a failure between leaves
// the estimate counted, never more).
func (s *Store) Settle(ctx context.Context, t store.Request, reqs []store.Request, op algo.Adjust) (bool, error) {
	if err := store.ValidateTicket(t, store.MinTicket); err != nil {
		return false, err
	}
	keys := []string{s.ticketKey(t), s.ticketsKey(t), ""}
	args := []string{"", "", ""}
	if !t.Time.IsZero() {
		args[0] = itoa(t.Time.UnixMicro())
	}
	for i := range reqs {
		r := reqs[i]
		var code string
		var a []string
		var err error
		if op == algo.Reward {
			code, a, err = giveBackArgs(&r)
		} else {
			r.Time = t.Time
			code, a, err = adjustArgs(&r, op)
		}
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
	keys[2] = gen
	if s.client().Mode() == rueidis.ClientModeCluster {
		if len(hashSlotGroups(append([]string{keys[0]}, keys[3:]...))) > 1 {
			return s.settleAcrossHashSlots(ctx, c, t, reqs, op)
		}
		keys[2] = keys[0] // the forget goes apart, from its own hash slot
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

// settleAcrossHashSlots settles on a Cluster whose keys lie in several hash slots:
// the ticket is taken (settle.lua with no changes, in its hash slot), then each
// key changed.
func (s *Store) settleAcrossHashSlots(ctx context.Context, c rueidis.Client, t store.Request, reqs []store.Request, op algo.Adjust) (bool, error) {
	tk := s.ticketKey(t)
	now := ""
	if !t.Time.IsZero() {
		now = itoa(t.Time.UnixMicro())
	}
	n, err := settleScript.Exec(ctx, c, []string{tk, s.ticketsKey(t), tk}, []string{now, "", ""}).AsInt64()
	if err != nil || n == 0 {
		return false, err
	}
	for _, r := range reqs {
		if op == algo.Penalize {
			r.Time = t.Time
			if err := s.Adjust(ctx, r, op); err != nil {
				return true, err
			}
			continue
		}
		code, args, err := giveBackArgs(&r)
		if err != nil {
			return true, err
		}
		r.Time = t.Time
		if err := s.adjust(ctx, r, code, args); err != nil {
			return true, err
		}
	}
	return true, nil
}
