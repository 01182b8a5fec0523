package redis

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// Concurrency runs scripts/concurrency.lua with the limit, the hold, the
// cost and the plan's permit id and op (algo.ForPermit); besides ok
// and the refund token it reports the units held, the latest hold's end,
// when the cost would fit and the units admitted or freed.
var concurrencyBinding = func() binding {
	b := bind(binding{file: "concurrency.lua", letter: "c"},
		func(args []string, l algo.Concurrency, cost int64) []string {
			return append(args, itoa(l.Count), itoa(l.HoldFor.Microseconds()), itoa(cost), "0", "0")
		},
		func(algo.Concurrency) int64 { return 4 },
		func(l algo.Concurrency, now, cost int64, ok bool, val int64, extra []int64, committed bool) algo.Result {
			held, end, fit, admitted := extra[0], extra[1], extra[2], extra[3]
			if !committed {
				admitted = 0 // ok, not recorded: the state before, as a peek sees it
			}
			retry := algo.Never
			switch {
			case ok:
				retry = 0
			case fit >= 0:
				retry = time.Duration(fit-now) * time.Microsecond
			}
			return l.Result(ok, now, held, end, retry, admitted)
		})
	plain := b.args
	b.args = func(args []string, p *algo.Plan, cost int64) []string {
		args = plain(args, p, cost)
		id, op := p.Permit()
		args[len(args)-2], args[len(args)-1] = itoa(id), itoa(int64(op))
		return args
	}
	return b
}()

var _ store.HolderLister = (*Store)(nil)

// Holders implements store.HolderLister: one HGETALL of the key's hash
// (scripts/concurrency.lua's layout), judged at req.Time or Redis TIME.
func (s *Store) Holders(ctx context.Context, req store.Request) ([]algo.Holder, error) {
	c, err := store.ValidateHolders(&req)
	if err != nil {
		return nil, err
	}
	ctx, cancel, cl, err := s.boundedCall(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	now := req.Time
	if now.IsZero() {
		if now, err = s.time(ctx); err != nil {
			return nil, err
		}
	}
	h, err := cl.Do(ctx, cl.B().Hgetall().Key(s.stateKey(req)).Build()).AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("redis store: holders: %w", err)
	}
	// The hash as the state algo.Concurrency keeps: holders in the order
	// they were taken, which a number gives those without a permit (the
	// others' order matters only among equal hold ends).
	type field struct {
		seq int64
		h   algo.Holder
	}
	var fs []field
	for f, v := range h {
		if f == "A" || f == "B" || f == "E" || f == "S" {
			continue
		}
		end, units, ok := strings.Cut(v, " ")
		e, err1 := strconv.ParseInt(end, 10, 64)
		n, err2 := strconv.ParseInt(units, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("redis store: holders: field %q holds %q", f, v)
		}
		var x field
		if seq, anon := strings.CutPrefix(f, "a"); anon {
			x.seq, _ = strconv.ParseInt(seq, 10, 64)
		} else if x.h.Permit, err = strconv.ParseInt(f, 10, 64); err != nil {
			return nil, fmt.Errorf("redis store: holders: field %q", f)
		}
		x.h.End, x.h.Units = e, n
		fs = append(fs, x)
	}
	slices.SortFunc(fs, func(a, b field) int { return cmp.Compare(a.seq, b.seq) })
	st := algo.State{}
	for _, x := range fs {
		st.Log = append(st.Log, x.h.Permit, x.h.End, x.h.Units)
	}
	return c.Holders(&st, now.UnixMicro()), nil
}
