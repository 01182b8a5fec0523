package server

import (
	"context"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/answer"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// rateLimitService is the gRPC service; docs/service.md says
// how it maps descriptors and answers.
type rateLimitService struct {
	rlv3.UnimplementedRateLimitServiceServer
	s *Server
}

// Bounds on one gRPC request: the descriptors and each one's entries (its
// path has 1 + 2·entries segments, as an HTTP check's path has at most
// maxPathSegments). A request above them is INVALID_ARGUMENT.
const (
	maxDescriptors = 64
	maxEntries     = (maxPathSegments - 1) / 2
)

// descriptorPath returns the policy path of an Envoy descriptor:
// [domain, key1, value1, …, keyN, valueN].
func descriptorPath(domain string, entries []*rlcommon.RateLimitDescriptor_Entry) []string {
	path := make([]string, 1, 1+2*len(entries))
	path[0] = domain
	for _, e := range entries {
		path = append(path, e.GetKey(), e.GetValue())
	}
	return path
}

// ShouldRateLimit implements Envoy's RLS v3: it reads the request into a
// query of one exact path per descriptor, decides them together, and
// answers each descriptor, with the quota a proxy asked for and the
// RateLimit fields.
func (g *rateLimitService) ShouldRateLimit(ctx context.Context, req *rlv3.RateLimitRequest) (*rlv3.RateLimitResponse, error) {
	s := g.s
	s.inflight.Add(1)
	defer s.inflight.Done()
	c := answer.Get("grpc")
	defer c.Put()
	envoy := s.cfg.servesEnvoy()
	if err := readRequest(req, c, envoy, envoy && s.cfg.Envoy.QuotaMode); err != nil {
		s.m.badRequests.WithLabelValues("grpc").Inc()
		return nil, err
	}
	if why := s.xdsWait.Load(); why != nil {
		// As envoyproxy/ratelimit answers without a configuration; Envoy
		// then lets the request through or not by its failure_mode_deny.
		return nil, status.Error(codes.Unavailable, "no rate limit configuration loaded: "+*why)
	}
	// an end (a descriptor with is_negative_hits) gives back: nothing to wait for
	c.Wait = !slices.ContainsFunc(c.Query.Paths, func(pq policy.PathQuery) bool { return pq.End })
	s.pipe.Answer(ctx, c)
	s.observe(c)
	switch {
	case c.Gone:
		return nil, status.FromContextError(ctx.Err()).Err()
	case c.Status == http.StatusBadRequest:
		return nil, status.Error(codes.InvalidArgument, c.Err.Error())
	}
	resp := g.response(ctx, c)
	if s.cfg.servesEnvoy() && s.cfg.Envoy.DynamicMetadata {
		var own map[string]bool
		if rc := s.rlconfig.Load(); rc != nil && rc.p == s.current.Load() {
			own = rc.quota
		}
		resp.DynamicMetadata = dynamicMetadata(req, c.Query.Paths, own)
	}
	return resp, nil
}

// dynamicMetadata is envoyproxy/ratelimit's dynamic metadata of a request
// (RESPONSE_DYNAMIC_METADATA), as the version envoydiff runs writes it:
// its domain, each descriptor's entries ("key=value"), per-request limit
// (in protobuf's text format) and hits_addend, the request's hits_addend
// unless 0, whether a descriptor's limit is in quota mode
// (quotaModeEnabled), and the indexes of those over it
// (quotaModeViolations), from the decided paths. own holds the patterns
// of the nodes in quota mode of their own (rlconfig.quota): under
// QUOTA_MODE every hit is in quota mode, and only those enable.
func dynamicMetadata(req *rlv3.RateLimitRequest, paths []policy.PathQuery, own map[string]bool) *structpb.Struct {
	ds := make([]*structpb.Value, 0, len(req.Descriptors))
	for _, d := range req.Descriptors {
		if d == nil {
			continue
		}
		entries := make([]*structpb.Value, len(d.Entries))
		for i, e := range d.Entries {
			entries[i] = structpb.NewStringValue(e.GetKey() + "=" + e.GetValue())
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if l := d.GetLimit(); l != nil {
			f["limit"] = structpb.NewStringValue(l.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		ds = append(ds, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	quota := false
	var over []*structpb.Value
	for i := range paths {
		pq := &paths[i]
		if len(pq.Levels) == 0 || len(pq.Match.Hits) != 1 || !pq.Match.Hits[0].QuotaMode {
			continue // unlimited, replaced, overridden, or not in quota mode
		}
		// Only a descriptor's own quota_mode enables, not QUOTA_MODE's
		// (pq.QuotaMode, under which every hit says quota mode).
		quota = quota || !pq.QuotaMode || own[pq.Match.Hits[0].Pattern]
		if slices.ContainsFunc(pq.Levels, func(l policy.Level) bool { return !l.Result.Allowed }) {
			over = append(over, structpb.NewNumberValue(float64(i)))
		}
	}
	out := map[string]*structpb.Value{
		"domain":           structpb.NewStringValue(req.GetDomain()),
		"descriptors":      structpb.NewListValue(&structpb.ListValue{Values: ds}),
		"quotaModeEnabled": structpb.NewBoolValue(quota),
	}
	if len(over) > 0 {
		out["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: over})
	}
	if h := req.GetHitsAddend(); h != 0 {
		out["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	return &structpb.Struct{Fields: out}
}

// response is the answer of a decided call: each descriptor's status
// (OK for a stream's end, which gave back, and for the real cost it was
// settled with), the quota a proxy asked for, and
// the RateLimit fields; when the store failed, every descriptor OK (fail
// open) or OVER_LIMIT (fail closed).
func (g *rateLimitService) response(ctx context.Context, c *answer.Call) *rlv3.RateLimitResponse {
	resp := &rlv3.RateLimitResponse{OverallCode: rlv3.RateLimitResponse_OK, Statuses: make([]*rlv3.RateLimitResponse_DescriptorStatus, len(c.Query.Paths))}
	if !c.Decision.Allowed && !g.s.cfg.Envoy.ShadowMode { // SHADOW_MODE: OK whatever the statuses say
		resp.OverallCode = rlv3.RateLimitResponse_OVER_LIMIT
	}
	p := g.s.current.Load()
	denyUnmatched := p.DenyUnmatched()
	var ea envoyAnswer
	var e *envoyAnswer // Sluice's own answers when nil
	if g.s.cfg.servesEnvoy() {
		ea.now, e = time.Now(), &ea
		if rc := g.s.rlconfig.Load(); rc != nil && rc.p == p {
			ea.unlimited = rc.unlimited
		}
	}
	for i := range c.Query.Paths {
		switch pq := &c.Query.Paths[i]; {
		case c.Failed:
			resp.Statuses[i] = &rlv3.RateLimitResponse_DescriptorStatus{Code: resp.OverallCode}
		case pq.End:
			resp.Statuses[i] = descriptorStatus(pq, false, e)
			resp.Statuses[i].Code = rlv3.RateLimitResponse_OK
		case pq.Settled:
			resp.Statuses[i] = &rlv3.RateLimitResponse_DescriptorStatus{Code: rlv3.RateLimitResponse_OK}
		default:
			resp.Statuses[i] = descriptorStatus(pq, denyUnmatched, e)
		}
	}
	if resp.OverallCode == rlv3.RateLimitResponse_OK && !c.Failed && c.Wait {
		if units := quotaAsked(ctx); units > 0 {
			resp.Quota = g.quota(ctx, &c.Query, units)
		}
	}
	if e != nil {
		resp.ResponseHeadersToAdd = e.headers(g.s.cfg.Envoy, resp.Statuses)
		return resp
	}
	if c.Header == nil {
		c.Header = http.Header{}
	}
	c.SetHeader(c.Header, true, false)
	for _, f := range grpcFields {
		if v := c.Header[f[1]]; len(v) > 0 {
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: f[0], Value: v[0]})
		}
	}
	return resp
}

// grpcFields are the header fields a gRPC answer adds (the draft's, and
// Retry-After), as the draft spells them and as http.Header keys them.
var grpcFields = [...][2]string{{"RateLimit-Policy", "Ratelimit-Policy"}, {"RateLimit", "Ratelimit"}, {"Retry-After", "Retry-After"}}

// readRequest checks an RLS request and reads it into c's query: one
// exact path per descriptor (domain, then each entry's key and value), at
// the descriptor's hits_addend or else the request's (at least 1). A
// descriptor with is_negative_hits is a stream's End, one with a
// hits_addend of its own a Start (Envoy's rate_limits entry with
// hits_addend: a start whose end may give it back; policy.PathQuery.Start).
// The error is an InvalidArgument status.
//
// With envoy (the Envoy drop-in), a descriptor's limit is envoyproxy/ratelimit's
// (policy.PathQuery.Override); else it is honoured where the node says
// request_limit. A descriptor's hits_addend above 2^31-1 is refused, or
// with envoy taken as envoyproxy/ratelimit takes it, up to algo.MaxCount:
// more than any limit admits. With quota, every path is in quota mode
// (policy.PathQuery.QuotaMode).
func readRequest(req *rlv3.RateLimitRequest, c *answer.Call, envoy, quota bool) error {
	switch n := len(req.GetDescriptors()); {
	case req.GetDomain() == "":
		return status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	case n == 0:
		return status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	case n > maxDescriptors:
		return status.Errorf(codes.InvalidArgument, "%d descriptors, more than %d", n, maxDescriptors)
	}
	reqCost := int64(max(req.GetHitsAddend(), 1))
	c.Query.Paths = slices.Grow(c.Query.Paths, len(req.Descriptors))[:len(req.Descriptors)]
	pqs := c.Query.Paths
	for i, d := range req.Descriptors {
		if n := len(d.GetEntries()); n > maxEntries {
			return status.Errorf(codes.InvalidArgument, "descriptor %d has %d entries, more than %d", i, n, maxEntries)
		}
		cost := reqCost
		if h := d.GetHitsAddend(); h != nil {
			switch v := h.GetValue(); {
			case v <= math.MaxInt32:
				cost = int64(v)
			case envoy:
				cost = int64(min(v, uint64(algo.MaxCount)))
			default:
				return status.Errorf(codes.InvalidArgument, "descriptor %d: hits_addend %d is too large", i, v)
			}
		}
		pq := &pqs[i]
		pq.Cost, pq.Exact = cost, true
		pq.End = d.GetIsNegativeHits()
		pq.Start = !pq.End && d.GetHitsAddend() != nil
		pq.Limit, pq.Override, pq.QuotaMode = nil, false, quota
		if o := d.GetLimit(); o != nil {
			// A per-request limit (policy.PathQuery.Limit); 0 admits
			// nothing, as Envoy's, in the drop-in.
			window, ok := overrideUnits[o.GetUnit()]
			if !ok || o.GetRequestsPerUnit() == 0 && !envoy {
				return status.Errorf(codes.InvalidArgument, "descriptor %d: limit %d per %v: want requests_per_unit above 0 per a second, minute, hour, day, month (30 days) or year (365 days)", i, o.GetRequestsPerUnit(), o.GetUnit())
			}
			pq.Limit = &algo.FixedWindow{Count: int64(o.GetRequestsPerUnit()), Window: window}
			pq.Override = envoy
		}
		if len(d.GetEntries()) > 0 { // Envoy's service limits nothing for an empty descriptor
			pq.Path = descriptorPath(req.Domain, d.Entries)
		}
	}
	return nil
}

// descriptorStatus is a decided path's answer: OK or OVER_LIMIT, with the
// most restrictive limit of its levels (enforced ones first; with only
// shadow ones, the shadow one with the least remaining), what remains of
// it and when it is full again. An unlimited path reports the most that
// can remain; a path with no level (none matched, or its limit was
// replaced) is OK, unless it matched nothing and unmatched is deny.
// With e (the service serves Envoy's configuration), the fields are
// envoyproxy/ratelimit's: see envoyAnswer.
func descriptorStatus(pq *policy.PathQuery, denyUnmatched bool, e *envoyAnswer) *rlv3.RateLimitResponse_DescriptorStatus {
	mine := pq.Levels
	switch {
	case pq.Match.Listed.List == "deny":
		return &rlv3.RateLimitResponse_DescriptorStatus{Code: rlv3.RateLimitResponse_OVER_LIMIT}
	case e != nil && len(mine) == 0 && pq.Match.Depth == len(pq.Path) && e.unlimited[pq.Match.Pattern]:
		return &rlv3.RateLimitResponse_DescriptorStatus{Code: rlv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	case e != nil && len(mine) == 0 && pq.Match.Unlimited:
		return &rlv3.RateLimitResponse_DescriptorStatus{Code: rlv3.RateLimitResponse_OK}
	case pq.Match.Unlimited || pq.Match.Listed.List == "allow":
		return &rlv3.RateLimitResponse_DescriptorStatus{Code: rlv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	case len(mine) == 0 && denyUnmatched && pq.Match.Unmatched:
		return &rlv3.RateLimitResponse_DescriptorStatus{Code: rlv3.RateLimitResponse_OVER_LIMIT}
	case len(mine) == 0:
		return &rlv3.RateLimitResponse_DescriptorStatus{Code: rlv3.RateLimitResponse_OK}
	}
	sum := policy.Summarize(mine)
	st := &rlv3.RateLimitResponse_DescriptorStatus{Code: rlv3.RateLimitResponse_OK}
	if !sum.Allowed {
		st.Code = rlv3.RateLimitResponse_OVER_LIMIT
	}
	best := -1
	for j := range mine {
		if best < 0 || mine[best].Shadow && !mine[j].Shadow ||
			mine[best].Shadow == mine[j].Shadow && mine[j].Result.Remaining < mine[best].Result.Remaining {
			best = j
		}
	}
	r := mine[best].Result
	if !mine[best].Shadow {
		r.Remaining, r.ResetAfter = sum.Remaining, sum.ResetAfter
	}
	name := mine[best].Name // Envoy's rate_limit name, as envoyproxy/ratelimit answers it
	if name == "" && e == nil {
		name = mine[best].Pattern
	}
	st.CurrentLimit = envoyLimit(mine[best].Limit, name)
	st.LimitRemaining = uint32(min(max(r.Remaining, 0), math.MaxUint32))
	st.DurationUntilReset = durationpb.New(r.ResetAfter)
	if e != nil {
		if !r.Allowed || st.Code == rlv3.RateLimitResponse_OVER_LIMIT { // a shadow level's too
			st.LimitRemaining = 0
		}
		st.DurationUntilReset = e.reset(st.CurrentLimit.Unit)
	}
	if !r.Allowed && mine[best].Shadow && len(pq.Match.Hits) == 1 && pq.Match.Hits[0].QuotaMode {
		// Over quota: envoyproxy/ratelimit answers it OK, without a reset.
		st.DurationUntilReset = nil
	}
	return st
}

// envoyAnswer is what answers envoyproxy/ratelimit's way need: when the
// call was answered, and the patterns of Envoy's unlimited descriptors
// (rlconfig). Its statuses differ from Sluice's own in four fields: an
// over-limit descriptor has nothing remaining (Sluice's own: what is left
// for a smaller cost); the time until reset is always that to the end of
// the limit's unit, counted from the epoch in whole seconds, even when
// nothing was counted (a peek, a cost above the limit); an unnamed
// limit's name is empty (Sluice's own: the node's pattern); and only a
// descriptor whose last entry reaches an unlimited descriptor is
// unlimited (2^32-1 remaining), one with neither rate_limit nor nested
// descriptors has no limit and nothing remaining (Sluice's own: every
// path that reaches an unlimited node is unlimited).
type envoyAnswer struct {
	now       time.Time
	unlimited map[string]bool
}

// reset is the time from e.now to the end of its window of unit, as
// envoyproxy/ratelimit counts it: whole seconds, 1 to the unit's.
func (e *envoyAnswer) reset(unit rlv3.RateLimitResponse_RateLimit_Unit) *durationpb.Duration {
	for _, u := range envoyUnits {
		if u.unit == unit {
			secs := int64(u.d / time.Second)
			return &durationpb.Duration{Seconds: secs - e.now.Unix()%secs}
		}
	}
	return &durationpb.Duration{}
}

// headers are envoyproxy/ratelimit's response headers of an answer of
// statuses: with h.ResponseHeaders, the limit, remaining and reset of the
// last over-limit status, or else of the first with the least remaining,
// of those with a limit; otherwise none.
func (e *envoyAnswer) headers(h EnvoyConfig, statuses []*rlv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	if !h.ResponseHeaders {
		return nil
	}
	var near *rlv3.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	for _, st := range statuses {
		if st.CurrentLimit == nil {
			continue
		}
		if st.LimitRemaining < least || st.Code == rlv3.RateLimitResponse_OVER_LIMIT {
			near, least = st, st.LimitRemaining
		}
	}
	if near == nil {
		return nil
	}
	return []*corev3.HeaderValue{
		{Key: h.LimitHeader, Value: strconv.FormatUint(uint64(near.CurrentLimit.RequestsPerUnit), 10)},
		{Key: h.RemainingHeader, Value: strconv.FormatUint(uint64(near.LimitRemaining), 10)},
		{Key: h.ResetHeader, Value: strconv.FormatInt(e.reset(near.CurrentLimit.Unit).Seconds, 10)},
	}
}

// quota grants a proxy that asked for units of quota what the store
// gives for q (Server.grant), or nil. A failed grant is logged: the check
// itself stands.
func (g *rateLimitService) quota(ctx context.Context, q *policy.Query, units int64) *rlv3.RateLimitResponse_Quota {
	gctx, cancel := context.WithTimeout(ctx, g.s.timeout)
	gr, err := g.s.grant(gctx, q, units)
	cancel()
	if err != nil {
		g.s.log.Warn("quota grant failed", "err", err)
		return nil
	}
	if gr.Units == 0 {
		return nil
	}
	g.s.m.quotaGranted.Add(float64(gr.Units))
	return &rlv3.RateLimitResponse_Quota{Requests: uint32(gr.Units),
		ExpirationSpecifier: &rlv3.RateLimitResponse_Quota_ValidUntil{ValidUntil: timestamppb.New(gr.Until)}}
}

// quotaHeader is the gRPC request metadata by which a client asks for
// quota (RateLimitResponse.Quota): the number of requests it would admit
// on its own. An Envoy proxy sends it with the rate limit service's
// grpc_service initial_metadata.
const quotaHeader = "x-sluice-quota"

// grant asks the store for quota for a proxy that admits q's paths on its
// own: units more requests of q (policy.LeaseRequests), or nothing when
// the store does not grant (store.Granter) or q's limits cannot be leased.
func (s *Server) grant(ctx context.Context, q *policy.Query, units int64) (store.Grant, error) {
	g, ok := s.store.(store.Granter)
	if !ok {
		return store.Grant{}, nil
	}
	reqs, ok := policy.LeaseRequests(q)
	if !ok {
		return store.Grant{}, nil
	}
	return g.Grant(ctx, reqs, units)
}

// quotaAsked returns the units the call's metadata asks for (0 when it asks
// for none, or for something that is not a positive number).
func quotaAsked(ctx context.Context) int64 {
	v := metadata.ValueFromIncomingContext(ctx, quotaHeader)
	if len(v) == 0 {
		return 0
	}
	n, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return n // the store grants at most its own bound
}

// envoyUnits are Envoy's units with their lengths, as Envoy's rate limit
// service counts them (a month is 30 days, a year 365).
// overrideUnits are the units of a descriptor's limit, as
// envoyproxy/ratelimit counts them (a month 30 days, a year 365).
var overrideUnits = map[typev3.RateLimitUnit]time.Duration{
	typev3.RateLimitUnit_SECOND: time.Second,
	typev3.RateLimitUnit_MINUTE: time.Minute,
	typev3.RateLimitUnit_HOUR:   time.Hour,
	typev3.RateLimitUnit_DAY:    24 * time.Hour,
	typev3.RateLimitUnit_MONTH:  30 * 24 * time.Hour,
	typev3.RateLimitUnit_YEAR:   365 * 24 * time.Hour,
}

var envoyUnits = []struct {
	unit rlv3.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
	{rlv3.RateLimitResponse_RateLimit_SECOND, time.Second},
	{rlv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	{rlv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	{rlv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	{rlv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	{rlv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	{rlv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

// envoyLimit expresses a limit's steady rate (algo.Limit.SteadyRate) as
// Envoy's requests per unit: a period of exactly one unit gives n per that
// unit; otherwise the smallest unit in which the rate is a whole number of
// at least 1, or else the largest unit, rounded down. A nil limit (a user
// script's level) gives a limit with only its name.
func envoyLimit(l algo.Limit, name string) *rlv3.RateLimitResponse_RateLimit {
	var n int64
	var period time.Duration
	if l != nil {
		n, period = algo.SteadyRate(l)
	}
	out := &rlv3.RateLimitResponse_RateLimit{Name: name}
	if n < 0 || period <= 0 {
		return out
	}
	for _, e := range envoyUnits {
		if period == e.d {
			out.RequestsPerUnit, out.Unit = uint32(min(n, math.MaxUint32)), e.unit
			return out
		}
	}
	if n == 0 { // a limit that admits nothing, over a period of no unit
		out.Unit = envoyUnits[0].unit
		return out
	}
	for _, e := range envoyUnits {
		num := float64(n) * float64(e.d) / float64(period)
		if num >= 1 && num == math.Trunc(num) {
			out.RequestsPerUnit, out.Unit = uint32(min(num, math.MaxUint32)), e.unit
			return out
		}
	}
	last := envoyUnits[len(envoyUnits)-1]
	num := float64(n) * float64(last.d) / float64(period)
	out.RequestsPerUnit, out.Unit = uint32(min(num, math.MaxUint32)), last.unit
	return out
}
