package server

import (
	"context"
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
)

// meteringPolicy is a budget of 100,000 tokens an hour per tenant that
// records charges in full (debt).
const meteringPolicy = `schema:
  ai:
    children:
      tenant:
        children:
          "*": {debt: true, limits: {algorithm: fixed_window, limit: 100000, window: 1h}}
`

const meteringBudget = 100_000

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
			cfg := Config{Store: "memory", HTTP: "127.0.0.1:0", GRPC: "127.0.0.1:0", PolicyData: []byte(meteringPolicy), PolicyName: "t.yaml"}
			if where == "redis" {
				cfg.Store = redistest.Start(t).URL()
			}
			s := serveForTest(t, cfg)
			conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			rls := rlv3.NewRateLimitServiceClient(conn)
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
					charged := meteringRound(t, m, rls, where+"-"+name)
					t.Logf("%d tokens charged on a budget of %d", charged, meteringBudget)
				})
			}
		})
	}
}

// meteringRound runs the flow on a fresh tenant within one window of the
// hour (a round that straddles two is run again) and checks it; it
// returns the tokens charged.
func meteringRound(t *testing.T, m meter, rls rlv3.RateLimitServiceClient, name string) int64 {
	for round := 0; ; round++ {
		tenant := fmt.Sprintf("%s-%d", name, round)
		start := time.Now()
		var charged atomic.Int64
		var wg sync.WaitGroup
		for c := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(c), uint64(round)))
				for n := 0; m(t, tenant, 0); n++ { // the check before the request
					if n == 1000 { // 20 callers, 1,750 tokens a request on average: ~3 each
						t.Errorf("caller %d: 1000 requests admitted on a budget of %d tokens", c, meteringBudget)
						return
					}
					tokens := 500 + r.Int64N(2500)
					m(t, tenant, tokens) // the charge when it ends: recorded, admitted or not
					charged.Add(tokens)
				}
				if m(t, tenant, 0) {
					t.Errorf("caller %d: a check admitted after one was denied", c)
				}
			}()
		}
		wg.Wait()
		if start.Truncate(time.Hour) != time.Now().Truncate(time.Hour) {
			continue // the window rolled over during the round
		}
		total := charged.Load()
		if total <= meteringBudget {
			t.Fatalf("checks denied after %d tokens of %d", total, meteringBudget)
		}
		// Give back all but the budget: the window is then exactly full if
		// every token was recorded (a check of 0 passes, of 1 does not).
		rlsCall(t, rls, tenant, total-meteringBudget, true)
		if !m(t, tenant, 0) || m(t, tenant, 1) {
			t.Fatalf("after %d charged and %d given back, the window is not exactly full: charges were lost or counted twice", total, total-meteringBudget)
		}
		if start.Truncate(time.Hour) != time.Now().Truncate(time.Hour) {
			continue
		}
		return total
	}
}

// rlsCall sends one descriptor (ai, tenant) at hits_addend cost, given
// back with negative.
func rlsCall(t *testing.T, rls rlv3.RateLimitServiceClient, tenant string, cost int64, negative bool) *rlv3.RateLimitResponse {
	d := desc("tenant", tenant)
	d.HitsAddend = wrapperspb.UInt64(uint64(cost))
	d.IsNegativeHits = negative
	r, err := rls.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "ai", Descriptors: []*rlcommon.RateLimitDescriptor{d}})
	if err != nil {
		t.Error(err)
		return &rlv3.RateLimitResponse{}
	}
	return r
}
