package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/policy"
)

// TestDebtEdges: on a budget with debt (meteringPolicy: 100,000 an hour),
// over HTTP and gRPC, on both stores, the answer, docs/usage-budgets.md
// and the metrics say one thing. A check of cost 0 is denied once the
// budget is spent to the unit (it was allowed at exactly 0 remaining); a
// charge past what remains is answered 429 / OVER_LIMIT with what remains
// after it, 0 (it showed what remained before); and it is counted as
// debt_recorded, not limited. The charge was recorded in full: giving it
// back to the unit brings the budget to exactly spent.
func TestDebtEdges(t *testing.T) {
	for _, where := range []string{"memory", "redis"} {
		t.Run(where, func(t *testing.T) {
			s, rls := meteringServer(t, where)
			type answer struct {
				allowed   bool
				remaining int64
			}
			httpCheck := func(t *testing.T, tenant string, cost int64) answer {
				t.Helper()
				body := fmt.Sprintf(`{"path": ["ai", "tenant", %q], "cost": %d}`, tenant, cost)
				resp, err := http.Post("http://"+s.HTTPAddr()+"/v1/check", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				var d DecisionJSON
				if err := json.Unmarshal(b, &d); err != nil || resp.StatusCode != 200 && resp.StatusCode != 429 || d.Allowed != (resp.StatusCode == 200) {
					t.Fatalf("check %s: %d %s %v", body, resp.StatusCode, b, err)
				}
				if want := fmt.Sprintf(`"ai/tenant/*";r=%d;`, d.Remaining); !strings.HasPrefix(resp.Header.Get("RateLimit"), want) {
					t.Errorf("check %s: RateLimit %q, want r=%d", body, resp.Header.Get("RateLimit"), d.Remaining)
				}
				return answer{d.Allowed, d.Remaining}
			}
			grpcCheck := func(t *testing.T, tenant string, cost int64) answer {
				t.Helper()
				r := rlsCall(t, rls, tenant, cost, false)
				if len(r.Statuses) != 1 {
					t.Fatalf("ShouldRateLimit %d: %v", cost, r)
				}
				return answer{r.OverallCode == rlv3.RateLimitResponse_OK, int64(r.Statuses[0].LimitRemaining)}
			}
			for api, check := range map[string]func(*testing.T, string, int64) answer{"http": httpCheck, "grpc": grpcCheck} {
				t.Run(api, func(t *testing.T) {
					checks := func(outcome string) float64 { return testutil.ToFloat64(s.m.checks.WithLabelValues(api, outcome)) }
					node := func(outcome string) float64 {
						return testutil.ToFloat64(s.m.decisions.WithLabelValues("ai/tenant/*", outcome))
					}
					// Spent to the unit: the peek after it is denied.
					spent := where + "-" + api + "-spent"
					if a := check(t, spent, 0); a != (answer{true, meteringBudget}) {
						t.Errorf("a peek of a fresh budget: %+v", a)
					}
					if a := check(t, spent, meteringBudget); a != (answer{true, 0}) {
						t.Errorf("a charge of the whole budget: %+v", a)
					}
					limited := checks("limited")
					if a := check(t, spent, 0); a != (answer{false, 0}) {
						t.Errorf("a peek of a budget spent to the unit: %+v, want denied", a)
					}
					if checks("limited") != limited+1 {
						t.Error("the denied peek was not counted limited")
					}

					// A charge past what remains (1,000): recorded, answered
					// with 0 remaining, counted debt_recorded.
					over := where + "-" + api + "-over"
					if a := check(t, over, meteringBudget-1000); a != (answer{true, 1000}) {
						t.Errorf("a charge of all but 1000: %+v", a)
					}
					limited, recorded, nodeLimited, nodeRecorded := checks("limited"), checks("debt_recorded"), node("limited"), node("debt_recorded")
					if a := check(t, over, 1834); a != (answer{false, 0}) {
						t.Errorf("a charge of 1834 with 1000 remaining: %+v, want denied with 0 remaining", a)
					}
					if checks("limited") != limited || checks("debt_recorded") != recorded+1 || node("limited") != nodeLimited || node("debt_recorded") != nodeRecorded+1 {
						t.Errorf("the recorded charge was counted limited %v→%v, debt_recorded %v→%v; node limited %v→%v, debt_recorded %v→%v",
							limited, checks("limited"), recorded, checks("debt_recorded"), nodeLimited, node("limited"), nodeRecorded, node("debt_recorded"))
					}
					if a := check(t, over, 0); a.allowed {
						t.Errorf("a peek in debt: %+v", a)
					}
					// Recorded in full: 834 given back (by the operator: an
					// is_negative_hits gives back only what a start took)
					// leaves it spent to the unit, one more leaves 1.
					undo := func(n int64) {
						if err := s.checker.Decide(context.Background(), &policy.Query{Op: policy.GiveBack, Paths: []policy.PathQuery{{Path: []string{"ai", "tenant", over}, Cost: n}}}, &policy.Decision{}); err != nil {
							t.Fatal(err)
						}
					}
					undo(834)
					if a := check(t, over, 0); a != (answer{false, 0}) {
						t.Errorf("after 834 given back: %+v, want spent", a)
					}
					undo(1)
					if a := check(t, over, 0); a != (answer{true, 1}) {
						t.Errorf("after 835 given back: %+v, want 1 remaining", a)
					}
				})
			}
		})
	}
}
