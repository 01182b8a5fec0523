package policy_test

import (
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// requests is one request per limit of the match's hits, from the root
// down, as policy.Checker builds them.
func requests(m policy.Match, cost int64, t time.Time) []store.Request {
	var reqs []store.Request
	for _, h := range m.Hits {
		for j, l := range h.Limits {
			reqs = append(reqs, store.Request{Key: h.LimitKey(j), Tag: h.Tag, Plan: algo.MustCompile(l), Cost: cost, Time: t, Shadow: h.Shadow})
		}
	}
	return reqs
}
