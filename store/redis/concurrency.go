package redis

import (
	"time"

	"github.com/sluicehq/sluice/algo"
)

// Concurrency runs scripts/concurrency.lua with the limit, the lease, the
// cost and the plan's permit id and op (algo.Plan.ForPermit); besides ok
// and the refund token it reports the units held, the latest lease end,
// when the cost would fit and the units admitted or freed.
var concurrencyBinding = func() binding {
	b := bind(binding{file: "concurrency.lua", letter: "c"},
		func(args []string, l algo.Concurrency, cost int64) []string {
			return append(args, itoa(l.Limit), itoa(algo.Micros(l.HoldFor)), itoa(cost), "0", "0")
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
	b.args = func(args []string, l algo.Limit, cost int64) []string {
		args = plain(args, l, cost)
		if p, ok := l.(*algo.Plan); ok {
			id, op := p.Permit()
			args[len(args)-2], args[len(args)-1] = itoa(id), itoa(int64(op))
		}
		return args
	}
	return b
}()
