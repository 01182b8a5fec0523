package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/store"
)

// consumersSuffix names a key's consumers list after the key.
const consumersSuffix = "#consumers"

var consumersScript = embeddedScript("consumers.lua")

// consumersKey returns the Redis key of a key's consumers list: the key's
// own name (keyName) with "#consumers" appended, so that it lives in the
// key's Cluster hash slot.
func consumersKey(prefix, key, tag string) string {
	return keyName(prefix, key+consumersSuffix, tag)
}

// PushConsumers implements store.ConsumerLog: one consumers.lua call per
// entry, all in one pipelined round trip.
func (s *Store) PushConsumers(ctx context.Context, entries []store.Consumed, keep int, ttl time.Duration) error {
	if keep <= 0 || len(entries) == 0 {
		return nil
	}
	ctx, cancel, c, err := s.boundedCall(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	n, ms := strconv.Itoa(keep), strconv.FormatInt(max(ttl.Milliseconds(), 1), 10)
	execs := make([]rueidis.LuaExec, len(entries))
	for i, e := range entries {
		execs[i] = rueidis.LuaExec{Keys: []string{consumersKey(s.prefix, e.Key, e.Tag)}, Args: []string{string(e.Entry), n, ms}}
	}
	for _, res := range consumersScript.ExecMulti(ctx, c, execs...) {
		if err := res.Error(); err != nil {
			return fmt.Errorf("redis store: consumers: %w", err)
		}
	}
	return nil
}

// Consumers implements store.ConsumerLog.
func (s *Store) Consumers(ctx context.Context, key, tag string) ([][]byte, error) {
	ctx, cancel, c, err := s.boundedCall(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	vals, err := c.Do(ctx, c.B().Lrange().Key(consumersKey(s.prefix, key, tag)).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil && !rueidis.IsRedisNil(err) {
		return nil, fmt.Errorf("redis store: consumers: %w", err)
	}
	out := make([][]byte, len(vals))
	for i, v := range vals {
		out[i] = []byte(v)
	}
	return out, nil
}

// ResetConsumers implements store.ConsumerLog: the lists' keys are deleted
// each on its own, in one pipelined round trip.
func (s *Store) ResetConsumers(ctx context.Context, reqs []store.Request) error {
	return s.deleteEach(ctx, "consumers", reqs, func(r store.Request) string { return consumersKey(s.prefix, r.Key, r.Tag) })
}
