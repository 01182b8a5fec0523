package server

import (
	"context"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

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
