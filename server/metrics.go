package server

import (
	"context"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/answer"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// metrics are the server's Prometheus metrics; docs/service.md
// lists them.
type metrics struct {
	reg         *prometheus.Registry
	checks      *prometheus.CounterVec
	decisions   *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	storeErrors prometheus.Counter
	badRequests *prometheus.CounterVec
	reloads     *prometheus.CounterVec
	loadedAt    prometheus.Gauge
	dropped     prometheus.Counter
	// quotaGranted counts the units granted to clients as RLS quota.
	quotaGranted prometheus.Counter
	// unmatched counts paths that matched no limit.
	unmatched prometheus.Counter
	// limitsIgnored counts per-request limits a node took no part of.
	limitsIgnored prometheus.Counter
	// delayed counts requests held for a policy's delay, and delayRefused
	// those refused because max_waiting were held.
	delayed, delayRefused *prometheus.CounterVec
	// slots counts units of concurrency limits by API and what became of
	// them: acquired, released, lost (a renewal found its permit gone).
	slots *prometheus.CounterVec
	// settles counts POST /v1/settle by outcome: settled, or refused (an
	// id settled already, expired or never issued).
	settles *prometheus.CounterVec

	// per-API children, looked up once
	httpChecks, grpcChecks, forwardChecks outcomeCounters
	// forwardRefused counts forward-auth requests the config refuses: a
	// route's key missing (missing: deny), no route (unmatched: deny).
	forwardRefused                              prometheus.Counter
	httpDuration, grpcDuration, forwardDuration prometheus.Observer
	nodes                                       sync.Map // pattern -> *nodeCounters
}

type outcomeCounters struct {
	allowed, limited, debtRecorded, errAllowed, errDenied prometheus.Counter
}

// count counts a decided check: debt_recorded when it was denied only by
// levels with debt that recorded its charge (algo.Debt: a charge after
// the request, counted in full), else allowed or limited.
func (o *outcomeCounters) count(d *policy.Decision) {
	switch {
	case d.Allowed:
		o.allowed.Inc()
	case onlyOwed(d):
		o.debtRecorded.Inc()
	default:
		o.limited.Inc()
	}
}

// onlyOwed reports whether every enforced level that denied d recorded
// its charge as debt (policy.Level.Owed), and one did.
func onlyOwed(d *policy.Decision) bool {
	owed := false
	for i := range d.Levels {
		l := &d.Levels[i]
		if l.Shadow || l.Result.Allowed {
			continue
		}
		if !l.Owed {
			return false
		}
		owed = true
	}
	return owed && d.Matched && d.Listed == ""
}

type nodeCounters struct {
	allowed, limited, debtRecorded, shadowLimited prometheus.Counter
}

// newMetrics makes the metrics; sluice_store_up pings within timeout, the
// store's, so that a scrape waits no longer on a store that hangs.
func newMetrics(ping func(context.Context) error, timeout time.Duration) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	storeUp := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_store_up", Help: "1 when the store answers a ping at scrape time, else 0.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if ping(ctx) != nil {
			return 0
		}
		return 1
	})
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_build_info", Help: "The build of sluice: version and Go version as labels; always 1.",
		ConstLabels: prometheus.Labels{"version": Version(), "goversion": runtime.Version()},
	})
	build.Set(1)
	m.checks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_checks_total", Help: "Checks by API and outcome.",
	}, []string{"api", "outcome"})
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_decisions_total", Help: "Level decisions by policy node and outcome.",
	}, []string{"node", "outcome"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_check_duration_seconds",
		Help:    "Decision latency, store round trip included.",
		Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
	}, []string{"api"})
	m.storeErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_store_errors_total", Help: "Decisions the store failed or timed out.",
	})
	m.badRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_bad_requests_total", Help: "Requests refused as malformed.",
	}, []string{"api"})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_policy_reloads_total", Help: "Policy reloads by result.",
	}, []string{"result"})
	m.loadedAt = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_policy_loaded_timestamp_seconds", Help: "When the current policy was loaded.",
	})
	m.dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_consumers_dropped_total", Help: "consumer entries dropped (queue full or store error).",
	})
	m.quotaGranted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_quota_granted_total", Help: "Requests granted to gRPC clients as quota (RateLimitResponse.Quota).",
	})
	m.unmatched = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_unmatched_paths_total", Help: "Paths (and gRPC descriptors) that matched no limit: allowed under unmatched: allow, denied under deny.",
	})
	m.limitsIgnored = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_request_limits_ignored_total", Help: "Per-request limits (a descriptor's limit, a check's \"limit\") ignored: the node they hit says no request_limit.",
	})
	m.delayed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_delayed_total", Help: "Requests held for a policy's delay before the answer, by API.",
	}, []string{"api"})
	m.delayRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_delay_refused_total", Help: "Delayed requests refused at once because max_waiting requests were held, by API.",
	}, []string{"api"})
	m.slots = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_slot_units_total", Help: "Units of concurrency limits (slots) acquired, released, and lost (renewals that found their permit gone), by API.",
	}, []string{"api", "op"})
	for _, api := range []string{"http", "grpc"} {
		for _, op := range []string{"acquired", "released", "lost"} {
			m.slots.WithLabelValues(api, op)
		}
	}
	m.settles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_settles_total", Help: "Estimates settled (POST /v1/settle), and settles refused: an id settled already, not settled within its time, or never issued.",
	}, []string{"outcome"})
	m.settles.WithLabelValues("settled")
	m.settles.WithLabelValues("refused")
	m.reg.MustRegister(m.delayed, m.delayRefused, m.slots, m.limitsIgnored, m.settles)
	for _, api := range []string{"grpc", "forward_auth"} {
		m.delayed.WithLabelValues(api)
		m.delayRefused.WithLabelValues(api)
	}
	m.reg.MustRegister(m.unmatched, m.quotaGranted, m.checks, m.decisions, m.duration, m.storeErrors, m.badRequests, m.reloads, m.loadedAt, m.dropped, storeUp, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	m.badRequests.WithLabelValues("http")
	m.badRequests.WithLabelValues("grpc")
	m.badRequests.WithLabelValues("forward_auth")
	m.httpChecks = m.outcomes("http")
	m.grpcChecks = m.outcomes("grpc")
	m.forwardChecks = m.outcomes("forward_auth")
	m.forwardRefused = m.checks.WithLabelValues("forward_auth", "refused")
	m.httpDuration = m.duration.WithLabelValues("http")
	m.grpcDuration = m.duration.WithLabelValues("grpc")
	m.forwardDuration = m.duration.WithLabelValues("forward_auth")
	return m
}

// registerOverLimit adds the over-limit cache's metrics.
func (m *metrics) registerOverLimit(dc store.DenialCache) {
	m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_over_limit_cache_hits_total", Help: "Decisions denied from the over-limit cache, without a store round trip.",
		}, func() float64 { return float64(dc.OverLimitStats().Hits) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_over_limit_cache_entries", Help: "Denials the over-limit cache holds.",
		}, func() float64 { return float64(dc.OverLimitStats().Entries) }),
	)
}

// registerLeases adds the leases' metrics.
func (m *metrics) registerLeases(l store.Leaser) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_leased_keys", Help: "Keys this instance follows for leased quota.",
		}, func() float64 { return float64(l.LeaseStats().Keys) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_leased_units", Help: "Units this instance's live leases hold unused: counted in the store, not yet admitted.",
		}, func() float64 { return float64(l.LeaseStats().Leased) }),
	)
}

// registerShares adds the metrics of a region's shares of global limits.
func (m *metrics) registerShares(sh store.Sharer) {
	counter := func(name, help string, v func(store.ShareStats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v(sh.ShareStats())) })
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_global_keys", Help: "Global keys this instance follows for its region's shares.",
		}, func() float64 { return float64(sh.ShareStats().Keys) }),
		counter("sluice_global_credited_units_total", "Units charged at home and credited to this region's shares by this instance's refills.",
			func(st store.ShareStats) int64 { return st.Credited }),
		counter("sluice_global_given_back_units_total", "Unused units this instance's refills took from the region's shares and gave back to home.",
			func(st store.ShareStats) int64 { return st.GivenBack }),
		counter("sluice_global_home_failures_total", "Calls to home that failed: the region was cut off, or home was failing over.",
			func(st store.ShareStats) int64 { return st.HomeFailures }),
	)
}

func (m *metrics) outcomes(api string) outcomeCounters {
	return outcomeCounters{
		allowed:      m.checks.WithLabelValues(api, "allowed"),
		limited:      m.checks.WithLabelValues(api, "limited"),
		debtRecorded: m.checks.WithLabelValues(api, "debt_recorded"),
		errAllowed:   m.checks.WithLabelValues(api, "store_error_allowed"),
		errDenied:    m.checks.WithLabelValues(api, "store_error_denied"),
	}
}

// node returns the counters of a policy node.
func (m *metrics) node(pattern string) *nodeCounters {
	if c, ok := m.nodes.Load(pattern); ok {
		return c.(*nodeCounters)
	}
	c := &nodeCounters{
		allowed:       m.decisions.WithLabelValues(pattern, "allowed"),
		limited:       m.decisions.WithLabelValues(pattern, "limited"),
		debtRecorded:  m.decisions.WithLabelValues(pattern, "debt_recorded"),
		shadowLimited: m.decisions.WithLabelValues(pattern, "shadow_limited"),
	}
	actual, _ := m.nodes.LoadOrStore(pattern, c)
	return actual.(*nodeCounters)
}

// release is this source's version, the top entry of CHANGELOG.md.
const release = "v0.1.0"

// Version is the version of the running build: the release, with the VCS
// revision and its time when the Go toolchain stamped them (a build from a
// git checkout), "+dirty" for uncommitted changes.
func Version() string {
	v := release
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	var rev, at, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+dirty"
			}
		}
	}
	if rev == "" {
		return v
	}
	v += " " + rev[:min(len(rev), 12)] + modified
	if at != "" {
		v += " " + at
	}
	return v
}

// observe counts an answered call in the metrics of its API: how long its
// decision took, its unmatched paths, and what it answered.
func (s *Server) observe(c *answer.Call) {
	if c.Gone && c.Took == 0 {
		return // nothing was decided
	}
	o, took := &s.m.httpChecks, s.m.httpDuration
	switch c.API {
	case "grpc":
		o, took = &s.m.grpcChecks, s.m.grpcDuration
	case "forward_auth":
		o, took = &s.m.forwardChecks, s.m.forwardDuration
	}
	took.Observe(c.Took.Seconds())
	if c.Err == nil {
		s.noteUnmatched(&c.Query)
	}
	switch {
	case c.Gone:
	case c.Status == http.StatusBadRequest:
		s.m.badRequests.WithLabelValues(c.API).Inc()
	case c.Failed && c.Decision.Allowed:
		o.errAllowed.Inc()
	case c.Failed:
		o.errDenied.Inc()
	case c.API == "forward_auth":
		s.countLevels(c.Decision.Levels)
		if c.Decision.Allowed {
			o.allowed.Inc()
		} else {
			o.limited.Inc()
		}
	default:
		s.countLevels(c.Decision.Levels)
		s.countSlots(c.API, algo.Acquire, &c.Decision)
		o.count(&c.Decision)
		var ends policy.Decision // the slots streams' ends released
		for i := range c.Query.Paths {
			if pq := &c.Query.Paths[i]; pq.End {
				ends.Levels = append(ends.Levels, pq.Levels...)
			}
		}
		s.countSlots(c.API, algo.Release, &ends)
	}
}

// slotUnits returns the most units a decision's concurrency levels
// admitted (an acquire) or freed (a release).
func slotUnits(d *policy.Decision) int64 {
	var n int64
	for i := range d.Levels {
		if l := &d.Levels[i]; isSlotLevel(l) {
			n = max(n, l.Result.Admitted)
		}
	}
	return n
}

// isSlotLevel reports whether a level is a concurrency limit's.
func isSlotLevel(l *policy.Level) bool {
	return l.Limit != nil && l.Limit.Kind() == algo.KindConcurrency
}

// hasSlotLevel reports whether a decision has a concurrency level.
func hasSlotLevel(d *policy.Decision) bool {
	for i := range d.Levels {
		if isSlotLevel(&d.Levels[i]) {
			return true
		}
	}
	return false
}

// countSlots counts a decision's slot units in the metrics.
func (s *Server) countSlots(api string, op algo.SlotOp, d *policy.Decision) {
	switch {
	case op == algo.Acquire && d.Allowed:
		if n := slotUnits(d); n > 0 {
			s.m.slots.WithLabelValues(api, "acquired").Add(float64(n))
		}
	case op == algo.Release:
		if n := slotUnits(d); n > 0 {
			s.m.slots.WithLabelValues(api, "released").Add(float64(n))
		}
	case op == algo.Renew && !d.Allowed:
		s.m.slots.WithLabelValues(api, "lost").Inc()
	}
}

// countLevels counts level outcomes in the metrics.
func (s *Server) countLevels(levels []policy.Level) {
	for i := range levels {
		l := &levels[i]
		c := s.m.node(l.Pattern)
		switch {
		case l.Result.Allowed:
			c.allowed.Inc()
		case l.Owed:
			c.debtRecorded.Inc()
		case l.Shadow:
			c.shadowLimited.Inc()
		default:
			c.limited.Inc()
		}
	}
}

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
