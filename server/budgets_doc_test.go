package server

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/goccy/go-yaml"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestUsageBudgetsEnvoyConfig: the Envoy route settings that
// docs/usage-budgets.md shows for a settle are a valid RateLimitPerRoute,
// and the requests Envoy makes of them (the request path's entries before
// each call, the stream-done entries in one request after it) keep a
// budget against Sluice: calls estimated at 3,000 tokens that use 1,000
// are admitted while an estimate fits, 8 on a budget of 10,000.
func TestUsageBudgetsEnvoyConfig(t *testing.T) {
	page, err := os.ReadFile("../docs/usage-budgets.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n# envoy: RateLimitPerRoute\n(.*?)```").FindSubmatch(page)
	if m == nil {
		t.Fatal("no RateLimitPerRoute block in docs/usage-budgets.md")
	}
	js, err := yaml.YAMLToJSON(m[1])
	if err != nil {
		t.Fatal(err)
	}
	var route ratelimitv3.RateLimitPerRoute
	if err := protojson.Unmarshal(js, &route); err != nil {
		t.Fatalf("not a RateLimitPerRoute: %v\n%s", err, m[1])
	}
	if err := route.ValidateAll(); err != nil {
		t.Fatalf("Envoy would refuse it: %v", err)
	}
	g := &rateLimitService{s: newTestServer(t, `schema:
  llm:
    children:
      tenant:
        children:
          "*": {limits: {algorithm: fixed_window, limit: 10000, window: 1h}}
`)}
	headers := map[string]string{"x-tenant": "acme", "x-max-tokens": "3000"}
	formats := map[string]string{"%REQ(x-max-tokens)%": "3000", "%DYNAMIC_METADATA(io.envoy.ai_gateway:llm_total_token)%": "1000"}
	// stage builds the request Envoy sends at one stage: a descriptor per
	// entry of the route whose apply_on_stream_done is done.
	stage := func(done bool) *rlv3.RateLimitRequest {
		req := &rlv3.RateLimitRequest{Domain: "llm"}
		for _, rl := range route.RateLimits {
			if rl.ApplyOnStreamDone != done {
				continue
			}
			d := &rlcommon.RateLimitDescriptor{}
			for _, a := range rl.Actions {
				h := a.GetRequestHeaders()
				if h == nil {
					t.Fatalf("an action this test does not play: %v", a)
				}
				d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: h.DescriptorKey, Value: headers[h.HeaderName]})
			}
			if ha := rl.HitsAddend; ha != nil {
				v, ok := formats[ha.Format]
				if !ok {
					t.Fatalf("a hits_addend this test does not play: %v", ha)
				}
				n := uint64(0)
				for _, c := range v {
					n = 10*n + uint64(c-'0')
				}
				d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(n), ha.IsNegativeHits
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		return req
	}
	ctx := context.Background()
	calls := 0
	for ; calls < 100; calls++ {
		r, err := g.ShouldRateLimit(ctx, stage(false))
		if err != nil {
			t.Fatal(err)
		}
		if r.OverallCode != rlv3.RateLimitResponse_OK {
			break
		}
		if _, err := g.ShouldRateLimit(ctx, stage(true)); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 8 {
		t.Fatalf("%d calls of 1,000 tokens estimated at 3,000 admitted on a budget of 10,000, want 8", calls)
	}
	peek := stage(false)
	peek.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
	if r, _ := g.ShouldRateLimit(ctx, peek); r.Statuses[0].LimitRemaining != 2000 {
		t.Fatalf("after 8 calls of 1,000: %v", r)
	}
	if !strings.Contains(string(page), "apply_on_stream_done") {
		t.Fatal("the page no longer explains apply_on_stream_done")
	}
}

// TestUsageBudgetsEnvoyStreamDone: Envoy AI Gateway's flow that
// docs/usage-budgets.md shows, against its configuration served as Envoy's
// (the drop-in, counts: each): a stream-done charge larger than what is
// left is recorded, as envoyproxy/ratelimit records it, and the next
// request is denied; with envoy.counts: all_or_nothing (Sluice's rules)
// it is dropped. Fails without counts: each (the charge was dropped).
func TestUsageBudgetsEnvoyStreamDone(t *testing.T) {
	page, err := os.ReadFile("../docs/usage-budgets.md")
	if err != nil {
		t.Fatal(err)
	}
	block := func(head string) []byte {
		m := regexp.MustCompile("(?s)```yaml\n# " + regexp.QuoteMeta(head) + "\n(.*?)```").FindSubmatch(page)
		if m == nil {
			t.Fatalf("no %q block in docs/usage-budgets.md", head)
		}
		return m[1]
	}
	js, err := yaml.YAMLToJSON(block("envoy: RateLimitPerRoute (Envoy AI Gateway)"))
	if err != nil {
		t.Fatal(err)
	}
	var route ratelimitv3.RateLimitPerRoute
	if err := protojson.Unmarshal(js, &route); err != nil {
		t.Fatal(err)
	}
	if err := route.ValidateAll(); err != nil {
		t.Fatalf("Envoy would refuse it: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/llm.yaml", block("ratelimit config: llm.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	// stage is the request Envoy sends at one stage, tokens the stream's.
	stage := func(done bool, tokens uint64) *rlv3.RateLimitRequest {
		req := &rlv3.RateLimitRequest{Domain: "llm"}
		for _, rl := range route.RateLimits {
			if rl.ApplyOnStreamDone != done {
				continue
			}
			d := &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: rl.Actions[0].GetRequestHeaders().DescriptorKey, Value: "acme"}}}
			switch ha := rl.HitsAddend; {
			case ha.Number != nil:
				d.HitsAddend = ha.Number
			case ha.Format == "%DYNAMIC_METADATA(io.envoy.ai_gateway:llm_total_token)%":
				d.HitsAddend = wrapperspb.UInt64(tokens)
			default:
				t.Fatalf("a hits_addend this test does not play: %v", ha)
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		return req
	}
	ctx := context.Background()
	for counts, wantNext := range map[string]rlv3.RateLimitResponse_Code{"": rlv3.RateLimitResponse_OVER_LIMIT, "all_or_nothing": rlv3.RateLimitResponse_OK} {
		g := &rateLimitService{s: newTestServerConfig(t, Config{Store: "memory", EnvoyConfigDir: dir, Envoy: EnvoyConfig{Counts: counts}})}
		if r, err := g.ShouldRateLimit(ctx, stage(false, 0)); err != nil || r.OverallCode != rlv3.RateLimitResponse_OK {
			t.Fatalf("%q: the first request: %v %v", counts, r, err)
		}
		if _, err := g.ShouldRateLimit(ctx, stage(true, 12000)); err != nil { // 12,000 tokens on 10,000
			t.Fatal(err)
		}
		r, err := g.ShouldRateLimit(ctx, stage(false, 0))
		if err != nil || r.OverallCode != wantNext {
			t.Errorf("envoy.counts %q: the request after a stream of 12,000 tokens on 10,000: %v %v, want %v", counts, r, err, wantNext)
		}
	}
}
