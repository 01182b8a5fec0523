package envoydiff

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/goccy/go-yaml"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A step is one request of a sequence (its domain set when it runs),
// sent after waiting, when boundary is above 0, until just after the next
// multiple of boundary seconds of the wall clock.
type step struct {
	req      *rlv3.RateLimitRequest
	boundary int64
}

// A sequence is a feature's configuration (one domain, written DOMAIN)
// and the requests sent on it, in order. unit is the shortest window of
// its limits, in seconds: a step during which one of its boundaries
// passed may have been decided in different windows by the two services,
// and voids the run (the sequence runs again on a fresh domain).
type sequence struct {
	feature string
	pair    string // which pair of services runs it
	n       int
	config  string
	unit    int64
	headers bool // compare the response headers too
	meta    bool // compare the dynamic metadata too
	json    bool // sent to POST /json, not over gRPC
	steps   []step
}

// A feature generates the n-th sequence of a seed.
type feature struct {
	name    string
	pair    string
	long    bool // only in the long run (bench/envoydiff.sh)
	headers bool
	meta    bool
	json    bool
	gen     func(r *rand.Rand) (config string, unit int64, steps []step)
}

var units = map[string]int64{"second": 1, "minute": 60, "hour": 3600, "day": 86400}

// d is a descriptor of key, value pairs.
func d(kv ...string) *rlcommon.RateLimitDescriptor {
	out := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		out.Entries = append(out.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// hits gives descriptor x its own hits_addend.
func hits(x *rlcommon.RateLimitDescriptor, n uint64) *rlcommon.RateLimitDescriptor {
	x.HitsAddend = wrapperspb.UInt64(n)
	return x
}

// rq is a request of descriptors ds with the request's hits_addend h.
func rq(h uint32, ds ...*rlcommon.RateLimitDescriptor) step {
	return step{req: &rlv3.RateLimitRequest{HitsAddend: h, Descriptors: ds}}
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

// limit is a rate_limit block in flow style.
func limit(unit string, n int) string {
	return fmt.Sprintf("{unit: %s, requests_per_unit: %d}", unit, n)
}

// oneKey is the configuration of one key with a limit (a rate_limit
// block).
func oneKey(key, lim string) string { return config(top("key: "+key, "rate_limit: "+lim)) }

// config is a configuration of the top-level descriptors ds (see top).
func config(ds ...string) string {
	return "domain: DOMAIN\ndescriptors:\n" + strings.Join(ds, "")
}

// top is a top-level descriptor of a configuration, without children: its
// fields, one a line ("key: user", "rate_limit: "+limit(...)).
func top(fields ...string) string {
	return "  - " + strings.Join(fields, "\n    ") + "\n"
}

// sometimes appends next() to the descriptors of s at one draw in k.
func sometimes(r *rand.Rand, k int, s step, next func() *rlcommon.RateLimitDescriptor) step {
	if r.IntN(k) == 0 {
		s.req.Descriptors = append(s.req.Descriptors, next())
	}
	return s
}

// features are every feature compared, each with its generator.
var features = []feature{
	{name: "plain", pair: "default", gen: genPlain},
	{name: "hits_addend", pair: "default", gen: genHitsAddend},
	{name: "nested", pair: "default", gen: genNested},
	{name: "stream_done", pair: "default", gen: genStreamDone},
	{name: "negative_hits", pair: "default", gen: genNegativeHits},
	{name: "multi_descriptor", pair: "default", gen: genMulti},
	{name: "shadow_mode", pair: "default", gen: genMode("shadow_mode", "s")},
	{name: "quota_mode", pair: "default", gen: genMode("quota_mode", "q")},
	{name: "replaces", pair: "default", gen: genReplaces},
	{name: "detailed_metric", pair: "default", gen: genDetailed},
	{name: "wildcard_share_threshold", pair: "default", gen: genWildcard},
	{name: "unlimited", pair: "default", gen: genUnlimited},
	{name: "request_limit", pair: "default", gen: genRequestLimit},
	{name: "window_second", pair: "default", gen: genWindow("second", 1, 3)},
	{name: "window_minute", pair: "default", long: true, gen: genWindow("minute", 60, 2)},
	{name: "json_api", pair: "default", json: true, gen: genJSON},
	{name: "response_headers_off", pair: "default", headers: true, gen: genPlain},
	{name: "response_headers_on", pair: "headers", headers: true, gen: genPlain},
	{name: "stop_increment_plain", pair: "stop_increment", gen: genPlain},
	{name: "stop_increment_hits_addend", pair: "stop_increment", gen: genHitsAddend},
	{name: "global_shadow_mode", pair: "global_modes", gen: genMulti},
	{name: "global_quota_mode", pair: "global_quota", meta: true, gen: genMulti},
	{name: "global_quota_request_limit", pair: "global_quota", gen: genRequestLimit},
	{name: "global_quota_own", pair: "global_quota", meta: true, gen: genMode("quota_mode", "q")}, // quotaModeEnabled names a descriptor in quota mode of its own
	{name: "dynamic_metadata", pair: "metadata", meta: true, gen: genMetadata},
}

// pairs are the variables of each pair of services, beside those every
// pair has (services_test.go).
var pairs = map[string][]string{
	"default": nil,
	"headers": {"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_LIMIT_HEADER=X-RateLimit-Limit",
		"LIMIT_REMAINING_HEADER=X-RateLimit-Remaining", "LIMIT_RESET_HEADER=X-RateLimit-Reset"},
	"stop_increment": {"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true"},
	"global_modes":   {"SHADOW_MODE=true"},
	"global_quota":   {"QUOTA_MODE=true", "RESPONSE_DYNAMIC_METADATA=true"},
	"metadata":       {"RESPONSE_DYNAMIC_METADATA=true"},
}

// genPlain: one limit per key, some keys with a value of their own.
func genPlain(r *rand.Rand) (string, int64, []step) {
	l1, l2 := 1+r.IntN(5), 1+r.IntN(4)
	u := pick(r, "minute", "hour", "day")
	cfg := config(top("key: user", "rate_limit: "+limit(u, l1)), top("key: api", "value: v1", "rate_limit: "+limit("hour", l2)))
	var steps []step
	for range 2*(l1+l2) + 4 {
		steps = append(steps, rq(0, pick(r, d("user", "u0"), d("user", "u1"), d("api", "v1"), d("api", "v2"))))
	}
	return cfg, min(units[u], 3600), steps
}

// genHitsAddend: the request's hits_addend and descriptors' own, 0 (a
// peek) included, now and then one above 2^31-1.
func genHitsAddend(r *rand.Rand) (string, int64, []step) {
	l := 3 + r.IntN(8)
	cfg := config(top("key: user", "rate_limit: "+limit("hour", l)), top("key: org", "rate_limit: "+limit("hour", 2*l)))
	var steps []step
	for range 16 {
		x := pick(r, d("user", "a"), d("user", "b"), d("org", "o"))
		h := uint32(0)
		if r.IntN(2) == 0 {
			h = uint32(r.IntN(l + 3))
		}
		switch r.IntN(10) {
		case 0, 1, 2:
			hits(x, uint64(r.IntN(l+3)))
		case 3:
			if r.IntN(3) == 0 {
				hits(x, 3_000_000_000)
			}
		}
		steps = append(steps, sometimes(r, 4, rq(h, x), func() *rlcommon.RateLimitDescriptor {
			return pick(r, d("user", "a"), d("org", "o"))
		}))
	}
	return cfg, 3600, steps
}

// genNested: a tree with limits at several depths (Envoy applies a node's
// limit only to a descriptor that ends there) and a top-level key that
// is also nested, as README's example 2.
func genNested(r *rand.Rand) (string, int64, []step) {
	l1, l2, l3, l4 := 2+r.IntN(4), 1+r.IntN(4), 1+r.IntN(3), 3+r.IntN(4)
	cfg := fmt.Sprintf(`domain: DOMAIN
descriptors:
  - key: tenant
    rate_limit: %s
    descriptors:
      - key: user
        rate_limit: %s
        descriptors:
          - key: action
            value: write
            rate_limit: %s
  - key: user
    rate_limit: %s
`, limit("hour", l1), limit("hour", l2), limit("hour", l3), limit("hour", l4))
	var steps []step
	one := func() *rlcommon.RateLimitDescriptor {
		t, u, a := pick(r, "t0", "t1"), pick(r, "u0", "u1"), pick(r, "write", "read")
		switch r.IntN(4) {
		case 0:
			return d("tenant", t)
		case 1:
			return d("tenant", t, "user", u)
		case 2:
			return d("tenant", t, "user", u, "action", a)
		}
		return d("user", u)
	}
	for range 20 {
		steps = append(steps, sometimes(r, 3, rq(0, one()), one))
	}
	return cfg, 3600, steps
}

// genStreamDone: Envoy AI Gateway's flow: at a request's start the
// descriptor with hits_addend 0 (is the budget spent?), at the stream's
// end (apply_on_stream_done) the same descriptor with the tokens used,
// at times more than what is left; or a start that counts 1.
func genStreamDone(r *rand.Rand) (string, int64, []step) {
	budget := 50 + r.IntN(150)
	cfg := oneKey("model", limit("hour", budget))
	var steps []step
	for range 8 {
		m := pick(r, "m0", "m1")
		start := uint64(pick(r, 0, 0, 1))
		steps = append(steps, rq(0, hits(d("model", m), start)))
		cost := uint64(r.IntN(budget * 3 / 4))
		if r.IntN(4) == 0 {
			cost = uint64(budget + r.IntN(budget))
		}
		steps = append(steps, rq(0, hits(d("model", m), cost)))
	}
	return cfg, 3600, steps
}

// genNegativeHits: the settle flow of docs/usage-budgets.md: a start
// charged the estimate, at the stream's end the real cost and the
// estimate with is_negative_hits.
func genNegativeHits(r *rand.Rand) (string, int64, []step) {
	budget := 100 + r.IntN(100)
	cfg := oneKey("model", limit("hour", budget))
	var steps []step
	for range 5 {
		est := uint64(10 + r.IntN(40))
		steps = append(steps, rq(0, hits(d("model", "m"), est)))
		neg := hits(d("model", "m"), est)
		neg.IsNegativeHits = true
		steps = append(steps, rq(0, hits(d("model", "m"), uint64(r.IntN(int(est)*2))), neg))
	}
	return cfg, 3600, steps
}

// genMulti: requests of two or three descriptors, of which one may deny
// while the others are OK, and one is in shadow mode.
func genMulti(r *rand.Rand) (string, int64, []step) {
	la, lb, ls := 1+r.IntN(3), 4+r.IntN(4), 1+r.IntN(3)
	cfg := config(top("key: a", "rate_limit: "+limit("hour", la)), top("key: b", "rate_limit: "+limit("hour", lb)),
		top("key: s", "shadow_mode: true", "rate_limit: "+limit("hour", ls)))
	var steps []step
	for range 14 {
		ds := []*rlcommon.RateLimitDescriptor{d("a", pick(r, "x", "y")), d("b", "z")}
		if r.IntN(2) == 0 {
			ds = append(ds, d("s", "w"))
		}
		r.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
		steps = append(steps, rq(0, ds...))
	}
	return cfg, 3600, steps
}

// genMode: a limit with mode (shadow_mode, quota_mode) on key k alone
// and beside an enforced one.
func genMode(mode, k string) func(r *rand.Rand) (string, int64, []step) {
	return func(r *rand.Rand) (string, int64, []step) {
		lm, ln := 1+r.IntN(3), 2+r.IntN(3)
		cfg := config(top("key: "+k, mode+": true", "rate_limit: "+limit("hour", lm)), top("key: n", "rate_limit: "+limit("hour", ln)))
		var steps []step
		for range 12 {
			steps = append(steps, sometimes(r, 2, rq(0, d(k, "v")), func() *rlcommon.RateLimitDescriptor { return d("n", "v") }))
		}
		return cfg, 3600, steps
	}
}

// genReplaces: README's example 7 at hour units.
func genReplaces(r *rand.Rand) (string, int64, []step) {
	l1, l2 := 1+r.IntN(3), 2+r.IntN(3)
	cfg := fmt.Sprintf(`domain: DOMAIN
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: %d
          unit: hour
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: %d
          unit: hour
`, l1, l2)
	k1, k2 := d("key_1", "value_1", "user", "bkthomps"), d("key_2", "value_2", "user", "bkthomps")
	var steps []step
	for range 12 {
		switch r.IntN(3) {
		case 0:
			steps = append(steps, rq(0, k1))
		case 1:
			steps = append(steps, rq(0, k2))
		default:
			steps = append(steps, rq(0, k1, k2))
		}
	}
	return cfg, 3600, steps
}

// genDetailed: detailed_metric on a key without a value, beside a value
// of its own (README's example 8).
func genDetailed(r *rand.Rand) (string, int64, []step) {
	l1, l2 := 1+r.IntN(3), 2+r.IntN(3)
	cfg := config(top("key: key1", "detailed_metric: true", "rate_limit: "+limit("hour", l1)), top("key: key1", "value: value1", "rate_limit: "+limit("hour", l2)))
	var steps []step
	for range 12 {
		steps = append(steps, rq(0, d("key1", pick(r, "value1", "other", "third"))))
	}
	return cfg, 3600, steps
}

// genWildcard: a wildcard value with and without share_threshold, and
// values it does not match.
func genWildcard(r *rand.Rand) (string, int64, []step) {
	l1, l2 := 2+r.IntN(3), 1+r.IntN(3)
	cfg := config(top("key: files", "value: files/*", "share_threshold: true", "rate_limit: "+limit("hour", l1)),
		top("key: other", "value: files/*", "rate_limit: "+limit("hour", l2)), top("key: other", "rate_limit: "+limit("hour", l2+2)))
	var steps []step
	for range 14 {
		v := pick(r, "files/a.pdf", "files/b.csv", "files/", "docs/x")
		steps = append(steps, rq(0, d(pick(r, "files", "other"), v)))
	}
	return cfg, 3600, steps
}

// genUnlimited: unlimited descriptors, a descriptor with neither
// rate_limit nor children, and a limited one, alone and together.
func genUnlimited(r *rand.Rand) (string, int64, []step) {
	l := 1 + r.IntN(3)
	cfg := config(top("key: ldap", "rate_limit:", "  unlimited: true"), top("key: bare"), top("key: azure", "rate_limit: "+limit("hour", l)))
	var steps []step
	for range 10 {
		ds := []*rlcommon.RateLimitDescriptor{pick(r, d("ldap", "x"), d("bare", "y"), d("azure", "z"), d("none", "n"))}
		if r.IntN(2) == 0 {
			ds = append(ds, d("azure", "z"))
		}
		steps = append(steps, rq(0, ds...))
	}
	return cfg, 3600, steps
}

// genRequestLimit: descriptors carrying a per-request limit
// (RateLimitDescriptor.limit, as Envoy Gateway sets), on a key with a
// configured limit and on one no rule matches.
func genRequestLimit(r *rand.Rand) (string, int64, []step) {
	l, o := 2+r.IntN(3), 1+r.IntN(3)
	cfg := oneKey("tenant", limit("hour", l))
	var steps []step
	for range 12 {
		x := d(pick(r, "tenant", "tenant", "free"), "t")
		if r.IntN(3) != 0 {
			x.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(o), Unit: typev3.RateLimitUnit_HOUR}
		}
		steps = append(steps, rq(0, x))
	}
	return cfg, 3600, steps
}

// genWindow: bursts past a limit of the unit, each just after a boundary
// of the unit: the count starts again in each window.
func genWindow(unit string, secs int64, bursts int) func(r *rand.Rand) (string, int64, []step) {
	return func(r *rand.Rand) (string, int64, []step) {
		l := 2 + r.IntN(3)
		cfg := oneKey("w", limit(unit, l))
		var steps []step
		for range bursts {
			for i := range l + 2 {
				s := rq(uint32(pick(r, 0, 1, 1, 2)), d("w", "v"))
				if i == 0 {
					s.boundary = secs
				}
				steps = append(steps, s)
			}
		}
		return cfg, secs, steps
	}
}

// readmeExamples reads the configuration examples of envoyproxy/ratelimit's
// README (each ```yaml block that starts with domain:), as features whose
// requests are generated from each example's descriptor tree.
func readmeExamples(path string) ([]feature, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []feature
	seen := map[string]int{}
	blocks := strings.Split(string(b), "```yaml\n")
	for _, blk := range blocks[1:] {
		body, _, ok := strings.Cut(blk, "```")
		if !ok || !strings.HasPrefix(body, "domain:") || strings.Contains(body, "<") {
			continue
		}
		first, rest, _ := strings.Cut(body, "\n")
		domain := strings.TrimSpace(strings.TrimPrefix(first, "domain:"))
		var tree struct {
			Descriptors []ydesc `yaml:"descriptors"`
		}
		if err := yaml.Unmarshal([]byte(body), &tree); err != nil {
			return nil, fmt.Errorf("%s: README example %s: %w", path, domain, err)
		}
		name := "readme_" + domain
		if seen[domain]++; seen[domain] > 1 {
			name += fmt.Sprintf("_%d", seen[domain])
		}
		cfg := "domain: DOMAIN\n" + rest
		unit := int64(86400)
		var paths [][]ydesc
		var walk func(prefix []ydesc, ds []ydesc)
		walk = func(prefix []ydesc, ds []ydesc) {
			for _, x := range ds {
				p := append(append([]ydesc(nil), prefix...), x)
				paths = append(paths, p)
				if x.RateLimit != nil && units[x.RateLimit.Unit] > 0 {
					unit = min(unit, units[x.RateLimit.Unit])
				}
				walk(p, x.Descriptors)
			}
		}
		walk(nil, tree.Descriptors)
		out = append(out, feature{name: name, pair: "default", gen: func(r *rand.Rand) (string, int64, []step) {
			return cfg, unit, readmeSteps(r, paths)
		}})
	}
	return out, nil
}

// ydesc is a descriptor of envoyproxy/ratelimit's configuration, as much
// of it as the requests are generated from.
type ydesc struct {
	Key       string `yaml:"key"`
	Value     string `yaml:"value"`
	RateLimit *struct {
		Unit string `yaml:"unit"`
	} `yaml:"rate_limit"`
	Descriptors []ydesc `yaml:"descriptors"`
}

// readmeSteps: 30 requests of one or two descriptors, drawn from four
// made from the example's tree (each of its paths, a wildcard's value
// with a suffix, a key without a value with one of two values), so that
// its small limits are reached.
func readmeSteps(r *rand.Rand, paths [][]ydesc) []step {
	var hot []*rlcommon.RateLimitDescriptor
	for range 4 {
		p := paths[r.IntN(len(paths))]
		var kv []string
		for _, x := range p {
			v := x.Value
			switch {
			case v == "":
				v = pick(r, "50.0.0.1", "2061111111")
			case strings.HasSuffix(v, "*"):
				v = strings.TrimSuffix(v, "*") + pick(r, "a", "b.pdf")
			}
			kv = append(kv, x.Key, v)
		}
		hot = append(hot, d(kv...))
	}
	var steps []step
	for range 30 {
		steps = append(steps, sometimes(r, 3, rq(0, hot[r.IntN(len(hot))]), func() *rlcommon.RateLimitDescriptor { return hot[r.IntN(len(hot))] }))
	}
	return steps
}

// genJSON: plain requests for POST /json, two of them replaced by one
// without descriptors (refused), one with a descriptor without entries,
// or a plain one.
func genJSON(r *rand.Rand) (string, int64, []step) {
	cfg, unit, steps := genPlain(r)
	for _, i := range []int{r.IntN(len(steps)), r.IntN(len(steps))} {
		steps[i] = pick(r, rq(0), rq(0, d()), rq(0, d("user", "u0")))
	}
	return cfg, unit, steps
}

// genMetadata: requests with the request's hits_addend and descriptors'
// own, of one to three descriptors of distinct keys, one of them in
// quota mode and soon over its limit, the others well within theirs
// (the answers' dynamic metadata is compared; a descriptor's own limit is
// in server's TestEnvoyDynamicMetadata).
func genMetadata(r *rand.Rand) (string, int64, []step) {
	cfg := config(top("key: user", "rate_limit: "+limit("hour", 1000)), top("key: org", "rate_limit: "+limit("hour", 1000)),
		top("key: q", "quota_mode: true", "rate_limit: "+limit("hour", 2)))
	var steps []step
	for range 12 {
		ds := []*rlcommon.RateLimitDescriptor{d("user", pick(r, "a", "b"))}
		if r.IntN(2) == 0 {
			ds = append(ds, d("org", "o"))
		}
		if r.IntN(2) == 0 {
			ds = append(ds, d("q", "x"))
		}
		for _, x := range ds {
			if r.IntN(2) == 0 {
				hits(x, uint64(r.IntN(3)))
			}
		}
		steps = append(steps, rq(pick[uint32](r, 0, 1, 2, 5), ds...))
	}
	return cfg, 3600, steps
}
