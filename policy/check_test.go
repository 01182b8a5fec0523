package policy_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

const seedPolicy = `schema:
  user:
    children:
      "*":                 # any user id not matched by name
        limits: [15, 30, 60]   # GCRA: max_burst 15, 30 per 60 s (the CL.THROTTLE arguments)
        children:
          trade:
            limits: [5, 10, 15]
`

func checker(t *testing.T, src string, st store.Store) *policy.Checker {
	t.Helper()
	p, err := policy.Parse("limits.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return &policy.Checker{Policy: policy.NewCurrent(p), Store: st}
}

// stores returns the memory store, a Redis server and a Redis Cluster.
func stores(t *testing.T) map[string]store.Store {
	ctx := context.Background()
	// A minute's timeout: the default second is one a busy machine can
	// outlast under a race of 200 goroutines (see sluice's limiterStores).
	rs, err := redis.Open(ctx, redistest.Start(t).URL(), redis.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := redis.Open(ctx, redistest.StartCluster(t).URL(), redis.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ms := memory.New()
	t.Cleanup(func() { ms.Close(); rs.Close(); cs.Close() })
	return map[string]store.Store{"memory": ms, "redis": rs, "cluster": cs}
}

// TestCheckSeedScenario: alex's trades and withdrawals share user:alex, and a
// denied trade does not eat the user's quota.
func TestCheckSeedScenario(t *testing.T) {
	t0 := time.UnixMicro(1800003000334587)
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			c := checker(t, seedPolicy, st)
			ctx := context.Background()
			var d policy.Decision
			check := func(path ...string) {
				t.Helper()
				if err := check(c, ctx, t0, path, 1, &d); err != nil {
					t.Fatal(err)
				}
			}
			// trade: GCRA 5 10 15 admits 6 at once; user: 15 30 60 admits 16.
			for i := 0; i < 6; i++ {
				check("user", "alex", "trade")
				if !d.Allowed {
					t.Fatalf("trade %d denied: %+v", i, d)
				}
			}
			check("user", "alex", "trade")
			if d.Allowed || len(d.Levels) != 2 || !d.Matched {
				t.Fatalf("7th trade: %+v", d)
			}
			if d.Levels[0].Key != "user:alex" || d.Levels[1].Key != "user:alex:trade" {
				t.Fatalf("level keys %q %q", d.Levels[0].Key, d.Levels[1].Key)
			}
			if !d.Levels[0].Result.Allowed || d.Levels[0].Result.Remaining != 10 {
				t.Fatalf("user level on a denied trade: %+v, want allowed with 10 remaining (not charged)", d.Levels[0].Result)
			}
			want := algo.Result{Allowed: false, Quota: 6, Remaining: 0, RetryAfter: 1500 * time.Millisecond, ResetAfter: 12 * time.Second} // user:alex resets last
			if d.Summary != want {
				t.Fatalf("summary %+v, want %+v", d.Summary, want)
			}
			// Withdrawals count against user:alex only: 10 are left.
			for i := 0; i < 10; i++ {
				check("user", "alex", "withdrawal")
				if !d.Allowed || len(d.Levels) != 1 {
					t.Fatalf("withdrawal %d: %+v", i, d)
				}
			}
			check("user", "alex", "withdrawal")
			if d.Allowed || d.Summary.RetryAfter != 2*time.Second || d.Summary.Quota != 16 {
				t.Fatalf("11th withdrawal: %+v", d.Summary)
			}
			// Bob is untouched; a path matching nothing is allowed, unmatched.
			check("user", "bob", "trade")
			if !d.Allowed || d.Summary.Remaining != 5 {
				t.Fatalf("bob: %+v", d.Summary)
			}
			check("nobody")
			if !d.Allowed || d.Matched || len(d.Levels) != 0 {
				t.Fatalf("unmatched: %+v", d)
			}
		})
	}
}

// TestConcurrentMixedPaths: 100 goroutines on mixed paths; no level ever
// admits more than its limit, and the user level admits exactly its limit.
func TestConcurrentMixedPaths(t *testing.T) {
	const src = `schema:
  user:
    children:
      "*":
        limits: [9, 1, 3600]
        children:
          trade:
            limits: [2, 1, 3600]
`
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			c := checker(t, src, st)
			paths := [][]string{{"user", "alex", "trade"}, {"user", "alex", "withdrawal"}, {"user", "bob", "trade"}, {"user", "bob", "deposit"}}
			var mu sync.Mutex
			admitted := map[string]int{}
			var wg sync.WaitGroup
			start := make(chan struct{})
			for g := 0; g < 100; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					var d policy.Decision
					if err := check(c, context.Background(), time.Time{}, paths[g%4], 1, &d); err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						mu.Lock()
						for _, l := range d.Levels {
							admitted[l.Key]++
						}
						mu.Unlock()
					}
				}()
			}
			close(start)
			wg.Wait()
			for _, user := range []string{"user:alex", "user:bob"} {
				if admitted[user] != 10 {
					t.Errorf("%s admitted %d, want exactly 10", user, admitted[user])
				}
				if n := admitted[user+":trade"]; n > 3 || n == 0 {
					t.Errorf("%s:trade admitted %d, want 1..3", user, n)
				}
			}
		})
	}
}

func TestUnmatchedDeny(t *testing.T) {
	c := checker(t, "unmatched: deny\n"+seedPolicy, memory.New())
	var d policy.Decision
	if err := check(c, context.Background(), time.Time{}, []string{"other"}, 1, &d); err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Matched || d.Summary.RetryAfter != algo.Never {
		t.Fatalf("unmatched with deny: %+v", d)
	}
}
