package redis

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// HashSlot returns the Redis Cluster hash slot of a Redis key: CRC16 (XMODEM)
// of the key, or of its hash tag (the text between the first '{' and the
// next '}', when not empty), modulo 16384.
func HashSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}

// hashSlotGroups splits key indices by Redis Cluster hash slot, in slot order.
func hashSlotGroups(keys []string) [][]int {
	byHashSlot := map[int][]int{}
	for i, k := range keys {
		hashSlot := HashSlot(k)
		byHashSlot[hashSlot] = append(byHashSlot[hashSlot], i)
	}
	hashSlots := make([]int, 0, len(byHashSlot))
	for hashSlot := range byHashSlot {
		hashSlots = append(hashSlots, hashSlot)
	}
	sort.Ints(hashSlots)
	groups := make([][]int, len(hashSlots))
	for i, hashSlot := range hashSlots {
		groups[i] = byHashSlot[hashSlot]
	}
	return groups
}

// decideAcrossHashSlots decides requests whose keys lie in several Cluster
// hash slots, where no one script may touch them all. Each hash slot's group runs
// decide.lua at once, in parallel, and so reserves its cost if its own
// levels pass. If every group passes, the request passes. If any group
// denies, each group that reserved is refunded with refund.lua.
//
// Between a reservation and its refund, the reserved cost is counted in its
// hash slot: a concurrent request there may be denied for capacity that is about
// to come back. The window is conservative — it can deny more than strictly
// necessary, never admit more than a limit — and lasts one round trip. If
// a refund itself fails (Redis unreachable), the reservation stays until
// the state expires, which again errs on the side of denying.
//
// All groups decide at one time: without an explicit time, one node's
// Redis TIME, read first, is used for every group.
func (s *Store) decideAcrossHashSlots(ctx context.Context, reqs []store.Request, keys []string, groups [][]int, results []algo.Result) (bool, error) {
	for _, r := range reqs {
		if r.Watch > 0 { // its events must be seen in its own script call
			return false, fmt.Errorf("%w: a request that watches others (a node's escalate) needs them in its hash slot on Redis Cluster: escalate on a node at or below the path's first \"*\"", store.ErrBadRequest)
		}
	}
	if reqs[0].Time.IsZero() {
		t, err := s.time(ctx)
		if err != nil {
			return false, err
		}
		pinned := make([]store.Request, len(reqs))
		for i, r := range reqs {
			r.Time = t
			pinned[i] = r
		}
		reqs = pinned
	}
	sub := make([][]store.Request, len(groups))
	subKeys := make([][]string, len(groups))
	for g, idx := range groups {
		for _, i := range idx {
			sub[g] = append(sub[g], reqs[i])
			subKeys[g] = append(subKeys[g], keys[i])
		}
	}
	checks := make([]checked, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			checks[g], errs[g] = s.check(ctx, sub[g], subKeys[g])
		}()
	}
	wg.Wait()
	pass, failed := true, false
	for g := range groups {
		if errs[g] != nil {
			failed = true
		} else if !checks[g].pass {
			pass = false
		}
	}
	if failed || !pass {
		// Refund every group that reserved, then report.
		var refundErr error
		for g := range groups {
			if errs[g] == nil && checks[g].pass {
				if err := s.refund(ctx, sub[g], subKeys[g], checks[g]); err != nil && refundErr == nil {
					refundErr = err
				}
				s.forgetHere(sub[g]...) // a denial cached meanwhile may have seen the reservation
			}
		}
		for _, err := range errs {
			if err != nil {
				return false, err
			}
		}
		if refundErr != nil {
			return false, refundErr
		}
	}
	for g, idx := range groups {
		c := checks[g]
		for j, i := range idx {
			results[i] = levelResult(reqs[i], c.now, c.ok[j], c.val[j], c.extra(j), committed(reqs[i], c.ok[j], pass, c.stopped))
		}
	}
	return pass, nil
}

// refund gives back what a group committed.
func (s *Store) refund(ctx context.Context, levels []store.Request, stateKeys []string, c checked) error {
	keys, err := blockKeys(levels, stateKeys, true) // the script's KEYS, as check gave them
	if err != nil {
		return err
	}
	args := append(append([]string(nil), c.args...), make([]string, len(keys))...)
	args[0] = strconv.FormatInt(c.now, 10)
	k := len(c.args) // the value of level j's key; "" for a block key
	for j, r := range levels {
		if c.ok[j] && r.Cost > 0 && !r.Plan.Debt() { // a peek committed nothing; a debt stays
			args[k] = strconv.FormatInt(c.val[j], 10)
		}
		k += 1 + int(blockExtras(r.Plan))
	}
	if err := refundDriver.script(c.set).Exec(ctx, bounded{s.client()}, keys, args).Error(); err != nil {
		return fmt.Errorf("redis store: refund: %w", err)
	}
	return nil
}

// Now implements store.Clock: Redis TIME (on Cluster, one node's), the
// clock of the decisions that carry no time.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	ctx, cancel, err := s.connected(ctx)
	if err != nil {
		return time.Time{}, err
	}
	defer cancel()
	return s.time(ctx)
}

// time reads Redis TIME.
func (s *Store) time(ctx context.Context) (time.Time, error) {
	c := bounded{s.client()}
	now, err := c.Do(ctx, c.B().Time().Build()).AsStrSlice()
	if err != nil || len(now) != 2 {
		return time.Time{}, fmt.Errorf("redis store: TIME: %v", err)
	}
	sec, err1 := strconv.ParseInt(now[0], 10, 64)
	usec, err2 := strconv.ParseInt(now[1], 10, 64)
	if err1 != nil || err2 != nil {
		return time.Time{}, fmt.Errorf("redis store: TIME replied %q", now)
	}
	return time.UnixMicro(sec*1_000_000 + usec), nil
}
