package server

import (
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/policy"
)

// With unmatched: allow (the default), a path that no limit matches is
// admitted, and a typo in a path means no limit. So every unmatched path
// counts in sluice_unmatched_paths_total, and the first path that falls
// off the policy at each place (the deepest node it reached, and the
// segment that matched nothing there) is logged, at most one line a
// second and maxUnmatchedLogged places in all.

// maxUnmatchedLogged bounds the places whose first unmatched path is
// logged, however many callers' ids end up in unmatched segments.
const maxUnmatchedLogged = 1000

// unmatchedLog remembers where unmatched paths were logged.
type unmatchedLog struct {
	mu     sync.Mutex
	logged map[string]bool
	last   time.Time
}

// noteUnmatched counts and logs the unmatched paths of q, as decided.
func (s *Server) noteUnmatched(q *policy.Query) {
	for i := range q.Paths {
		pq := &q.Paths[i]
		if pq.End {
			continue // a stream's end: it gave back, and decided nothing
		}
		if pq.LimitIgnored {
			s.m.limitsIgnored.Inc()
			if place := pq.Match.Hits[len(pq.Match.Hits)-1].Pattern; s.unmatched.first("request_limit "+place, time.Now()) {
				s.log.Warn("a request's own limit was ignored: its node takes none (give it request_limit: {max: ..., window: ...}); later ones are only counted (sluice_request_limits_ignored_total)",
					"node", place, "limit", pq.Limit.Count, "window", pq.Limit.Window.String())
			}
		}
		if !pq.Match.Unmatched {
			continue
		}
		s.m.unmatched.Inc()
		place := pq.Match.Pattern
		if pq.Match.Depth < len(pq.Path) {
			place += "/" + truncate(pq.Path[pq.Match.Depth], 64)
		}
		if s.unmatched.first(place, time.Now()) {
			path := make([]string, len(pq.Path))
			for j, seg := range pq.Path {
				path[j] = truncate(seg, 64)
			}
			how := "allowed (unmatched: allow)"
			if s.current.Load().DenyUnmatched() {
				how = "denied (unmatched: deny)"
			}
			s.log.Warn("a path matched no limit and was "+how+"; later ones that fall off the policy here are only counted (sluice_unmatched_paths_total)",
				"path", path, "matched_to", pq.Match.Pattern, "depth", pq.Match.Depth)
		}
	}
}

// first reports whether place is logged now: the first time it is seen,
// among the first maxUnmatchedLogged places, at most once a second.
func (u *unmatchedLog) first(place string, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.logged[place] || len(u.logged) >= maxUnmatchedLogged || now.Sub(u.last) < time.Second {
		return false
	}
	if u.logged == nil {
		u.logged = map[string]bool{}
	}
	u.logged[place], u.last = true, now
	return true
}

// truncate shortens s to at most n bytes, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "...(" + strconv.Itoa(len(s)) + " bytes)"
}
