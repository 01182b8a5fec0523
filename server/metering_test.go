package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// meteringPolicy is a budget of 100,000 tokens an hour per tenant that
// records charges in full (debt), and per API key one that does not.
const meteringPolicy = `schema:
  ai:
    children:
      tenant:
        children:
          "*": {debt: true, limits: {algorithm: fixed_window, limit: 100000, window: 1h}}
      key:
        children:
          "*": {limits: {algorithm: fixed_window, limit: 100000, window: 1h}}
`

const meteringBudget = 100_000

// meteringServer serves meteringPolicy on the memory store or a fresh
// Redis (where), over HTTP and gRPC, and returns it with an RLS client.
func meteringServer(t *testing.T, where string) (*Server, rlv3.RateLimitServiceClient) {
	cfg := Config{Store: "memory", HTTP: "127.0.0.1:0", GRPC: "127.0.0.1:0", PolicyData: []byte(meteringPolicy), PolicyName: "t.yaml"}
	if where == "redis" {
		cfg.Store = redistest.Start(t).URL()
	}
	s := serveForTest(t, cfg)
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, rlv3.NewRateLimitServiceClient(conn)
}

// meter is one way of reaching a server: a check that charges cost (0: a
// check before the request) and says whether it was admitted.
type meter func(t *testing.T, tenant string, cost int64) bool

// TestAIGatewayFlow is Envoy AI Gateway's flow on a budget with debt, on
// both stores, over a real RLS v3 client and over HTTP: 20 concurrent
// callers each check with a cost of 0 before a request and charge its
// real cost (random tokens) when the response ends, until a check is
// denied. Every token charged is recorded (nothing lost, read back
// through the protocol: giving back all but the budget leaves the window
// exactly full), and once a check is denied none is admitted again.
func TestAIGatewayFlow(t *testing.T) {
	for _, where := range []string{"memory", "redis"} {
		t.Run(where, func(t *testing.T) {
			s, rls := meteringServer(t, where)
			grpcMeter := func(t *testing.T, tenant string, cost int64) bool {
				r := rlsCall(t, rls, tenant, cost, false)
				return r.OverallCode == rlv3.RateLimitResponse_OK
			}
			httpMeter := func(t *testing.T, tenant string, cost int64) bool {
				body := fmt.Sprintf(`{"path": ["ai", "tenant", %q], "cost": %d}`, tenant, cost)
				resp, err := http.Post("http://"+s.HTTPAddr()+"/v1/check", "application/json", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return false
				}
				resp.Body.Close()
				if resp.StatusCode != 200 && resp.StatusCode != 429 {
					t.Errorf("check %s: %d", body, resp.StatusCode)
				}
				return resp.StatusCode == 200
			}
			for name, m := range map[string]meter{"grpc": grpcMeter, "http": httpMeter} {
				t.Run(name, func(t *testing.T) {
					charged := meteringRound(t, m, s, where+"-"+name)
					t.Logf("%d tokens charged on a budget of %d", charged, meteringBudget)
				})
			}
		})
	}
}

// meteringRound runs the flow on a fresh tenant within one window of the
// hour (a round that straddles two is run again) and checks it; it
// returns the tokens charged.
func meteringRound(t *testing.T, m meter, s *Server, name string) int64 {
	for round := 0; ; round++ {
		tenant := fmt.Sprintf("%s-%d", name, round)
		start := time.Now()
		var charged atomic.Int64
		var wg sync.WaitGroup
		// What the callers found wrong, reported once the round is known to
		// lie in one window: a check admitted after a denial is right when
		// the hour rolled over between them.
		var mu sync.Mutex
		var problems []string
		problem := func(format string, args ...any) {
			mu.Lock()
			problems = append(problems, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
		for c := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(c), uint64(round)))
				for n := 0; m(t, tenant, 0); n++ { // the check before the request
					if n == 1000 { // 20 callers, 1,750 tokens a request on average: ~3 each
						problem("caller %d: 1000 requests admitted on a budget of %d tokens", c, meteringBudget)
						return
					}
					tokens := 500 + r.Int64N(2500)
					m(t, tenant, tokens) // the charge when it ends: recorded, admitted or not
					charged.Add(tokens)
				}
				if m(t, tenant, 0) {
					problem("caller %d: a check admitted after one was denied", c)
				}
			}()
		}
		wg.Wait()
		if start.Truncate(time.Hour) != time.Now().Truncate(time.Hour) {
			continue // the window rolled over during the round
		}
		for _, p := range problems {
			t.Error(p)
		}
		total := charged.Load()
		if total <= meteringBudget {
			t.Fatalf("checks denied after %d tokens of %d", total, meteringBudget)
		}
		// Give back all but the budget (as an operator does: an
		// is_negative_hits gives back only what a start took): the window
		// is then exactly full if every token was recorded (a check of 0 is
		// denied, and passes once one more is given back).
		undo := func(n int64) {
			if err := s.checker.Decide(context.Background(), &policy.Query{Op: policy.GiveBack, Paths: []policy.PathQuery{{Path: []string{"ai", "tenant", tenant}, Cost: n}}}, &policy.Decision{}); err != nil {
				t.Fatal(err)
			}
		}
		undo(total - meteringBudget)
		full := !m(t, tenant, 0)
		undo(1)
		if !full || !m(t, tenant, 0) {
			t.Fatalf("after %d charged and %d given back, the window is not exactly full: charges were lost or counted twice", total, total-meteringBudget)
		}
		if start.Truncate(time.Hour) != time.Now().Truncate(time.Hour) {
			continue
		}
		return total
	}
}

// rlsCall sends one descriptor (ai, tenant: value) at hits_addend cost,
// given back with negative.
func rlsCall(t *testing.T, rls rlv3.RateLimitServiceClient, value string, cost int64, negative bool) *rlv3.RateLimitResponse {
	return rlsCallOn(t, rls, "tenant", value, cost, negative)
}

// rlsCallOn is rlsCall on the descriptor (ai, key: value).
func rlsCallOn(t *testing.T, rls rlv3.RateLimitServiceClient, key, value string, cost int64, negative bool) *rlv3.RateLimitResponse {
	d := desc(key, value)
	d.HitsAddend = wrapperspb.UInt64(uint64(cost))
	d.IsNegativeHits = negative
	r, err := rls.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "ai", Descriptors: []*rlcommon.RateLimitDescriptor{d}})
	if err != nil {
		t.Error(err)
		return &rlv3.RateLimitResponse{}
	}
	return r
}

// TestEstimateSettleFlow is the flow that keeps a budget under
// concurrency (LiteLLM's fix for its tokens-per-minute bypass): 20 callers
// estimate max_tokens (3,000) before a request, admitted only if it fits,
// and settle the real cost when the response ends. The tokens admitted
// never exceed the budget, and a budget is spent to within one estimate,
// on both stores: over HTTP (an estimate with "settle_within", then POST
// /v1/settle, once), on a node with debt and one without, and over a real
// RLS client (a descriptor of the estimate, then at stream end the same
// descriptor charged the real cost and given back the estimate with
// is_negative_hits, in one request: a settle).
func TestEstimateSettleFlow(t *testing.T) {
	const maxTokens = 3000
	for _, where := range []string{"memory", "redis"} {
		t.Run(where, func(t *testing.T) {
			s, rls := meteringServer(t, where)
			base := "http://" + s.HTTPAddr()
			// A flow on a descriptor key (tenant: debt, key: none): estimate,
			// then settle; false when the estimate is denied.
			httpFlow := func(key string) func(t *testing.T, value string, actual int64) bool {
				return func(t *testing.T, value string, actual int64) bool {
					var d DecisionJSON
					status := postJSON(t, base+"/v1/check", fmt.Sprintf(`{"path": ["ai", %q, %q], "cost": %d, "settle_within": "1m"}`, key, value, maxTokens), &d)
					if status != 200 {
						return false
					}
					if d.SettleTicket == "" {
						t.Error("an allowed estimate without a settle_id")
						return false
					}
					var a settleAnswer
					settle := fmt.Sprintf(`{"settle_id": %q, "cost": %d}`, d.SettleTicket, actual)
					if postJSON(t, base+"/v1/settle", settle, &a) != 200 || !a.Settled {
						t.Errorf("settle: %+v", a)
					}
					if postJSON(t, base+"/v1/settle", settle, &a) != 200 || a.Settled {
						t.Errorf("a second settle: %+v", a)
					}
					return true
				}
			}
			flows := map[string]func(t *testing.T, value string, actual int64) bool{
				"http-debt": httpFlow("tenant"),
				"http":      httpFlow("key"),
				"grpc": func(t *testing.T, value string, actual int64) bool {
					if rlsCallOn(t, rls, "key", value, maxTokens, false).OverallCode != rlv3.RateLimitResponse_OK {
						return false
					}
					charge, back := desc("key", value), desc("key", value)
					charge.HitsAddend = wrapperspb.UInt64(uint64(actual))
					back.HitsAddend, back.IsNegativeHits = wrapperspb.UInt64(maxTokens), true
					if _, err := rls.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "ai", Descriptors: []*rlcommon.RateLimitDescriptor{charge, back}}); err != nil {
						t.Error(err)
					}
					return true
				},
			}
			for name, flow := range flows {
				t.Run(name, func(t *testing.T) {
					for round := 0; ; round++ {
						value := fmt.Sprintf("settle-%s-%s-%d", where, name, round)
						start := time.Now()
						var admitted atomic.Int64
						var wg sync.WaitGroup
						for c := range 20 {
							wg.Add(1)
							go func() {
								defer wg.Done()
								r := rand.New(rand.NewPCG(uint64(c), uint64(round)))
								for n := 0; n < 1000; n++ {
									actual := 500 + r.Int64N(maxTokens-500+1)
									if !flow(t, value, actual) {
										return
									}
									admitted.Add(actual)
								}
								t.Errorf("caller %d: 1000 estimates admitted on a budget of %d", c, meteringBudget)
							}()
						}
						wg.Wait()
						if start.Truncate(time.Hour) != time.Now().Truncate(time.Hour) {
							continue // the window rolled over during the round
						}
						got := admitted.Load()
						t.Logf("%d tokens admitted of a budget of %d", got, meteringBudget)
						// The last caller denied was alone: every other
						// estimate was settled, so less than one was left.
						if got > meteringBudget || got <= meteringBudget-maxTokens {
							t.Fatalf("%d tokens admitted on a budget of %d", got, meteringBudget)
						}
						return
					}
				})
			}
			var a settleAnswer
			for _, bad := range []string{`{"settle_id": "e1.x", "cost": 1}`, `{"settle_id": "x"}`, `{"cost": 1}`, `{"settle_id": "x", "cost": -1, "y": 1}`} {
				if status := postJSON(t, base+"/v1/settle", bad, &a); status != 400 {
					t.Errorf("settle %s: %d", bad, status)
				}
			}
			for _, bad := range []string{`{"path": ["ai"], "settle_within": "0s"}`, `{"path": ["ai"], "settle_within": "25h"}`, `{"paths": [["ai"], ["b"]], "costs": [1], "settle_within": "1m"}`} {
				if status := postJSON(t, base+"/v1/check", bad, nil); status != 400 {
					t.Errorf("check %s: %d", bad, status)
				}
			}
		})
	}
}

// postJSON posts body to url and decodes a 200 answer into v (when not
// nil); it returns the status.
func postJSON(t *testing.T, url, body string, v any) int {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0
	}
	defer resp.Body.Close()
	if resp.StatusCode == 200 && v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Error(err)
		}
	}
	return resp.StatusCode
}
