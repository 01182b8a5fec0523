package server

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
)

// movedTime is a store whose clock a test sets: every decision, change,
// ticket and queue is at now (a give-back still at its estimate's time).
type movedTime struct {
	store.Store
	now *atomic.Int64 // µs
}

func (m movedTime) at() time.Time { return time.UnixMicro(m.now.Load()) }

func (m movedTime) DecideAll(ctx context.Context, reqs []store.Request, res []algo.Result) (bool, error) {
	for i := range reqs {
		reqs[i].Time = m.at()
	}
	return m.Store.DecideAll(ctx, reqs, res)
}

func (m movedTime) Now(context.Context) (time.Time, error) { return m.at(), nil }

func (m movedTime) Adjust(ctx context.Context, req store.Request, op algo.Adjust) error {
	req.Time = m.at()
	return m.Store.(store.Adjuster).Adjust(ctx, req, op)
}

func (m movedTime) Block(ctx context.Context, req store.Request, d time.Duration) error {
	req.Time = m.at()
	return m.Store.(store.Adjuster).Block(ctx, req, d)
}

func (m movedTime) Unblock(ctx context.Context, req store.Request) error {
	req.Time = m.at()
	return m.Store.(store.Adjuster).Unblock(ctx, req)
}

func (m movedTime) Issue(ctx context.Context, t store.Request, ttl time.Duration) error {
	t.Time = m.at()
	return m.Store.(store.Settler).Issue(ctx, t, ttl)
}

func (m movedTime) Settle(ctx context.Context, t store.Request, reqs []store.Request, op algo.Adjust) (bool, error) {
	t.Time = m.at()
	return m.Store.(store.Settler).Settle(ctx, t, reqs, op)
}

func (m movedTime) Enqueue(ctx context.Context, t, q store.Request, entry string, ttl time.Duration) error {
	t.Time, q.Time = m.at(), m.at()
	return m.Store.(store.TicketQueue).Enqueue(ctx, t, q, entry, ttl)
}

func (m movedTime) Dequeue(ctx context.Context, q store.Request) (string, error) {
	q.Time = m.at()
	return m.Store.(store.TicketQueue).Dequeue(ctx, q)
}

// movedServer serves policy over real gRPC on the memory store or a fresh
// Redis (where), at a clock the test sets, and returns the clock (µs) and
// an RLS client.
func movedServer(t *testing.T, where, policy string) (*atomic.Int64, rlv3.RateLimitServiceClient) {
	t.Helper()
	cfg := Config{Store: "memory", GRPC: "127.0.0.1:0", PolicyData: []byte(policy), PolicyName: "t.yaml", Timeout: testTimeout}
	if where == "redis" {
		cfg.Store = redistest.Start(t).URL()
	}
	s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	now := &atomic.Int64{}
	s.store = movedTime{s.store, now}
	s.checker.Store = s.store
	return now, serveRLS(t, s)
}

// serveRLS serves s on its listeners until the test ends, then closes
// it, and returns an RLS client of its gRPC listener.
func serveRLS(t *testing.T, s *Server) rlv3.RateLimitServiceClient {
	t.Helper()
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx, nil); close(done) }()
	t.Cleanup(func() { cancel(); <-done; s.Close() })
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlv3.NewRateLimitServiceClient(conn)
}

// streamDescs are Envoy's descriptors of docs/usage-budgets.md's settle
// on tenant: the start (the estimate), or the end (the real cost, then the
// estimate with is_negative_hits; cost < 0: the estimate alone, as when
// the response wrote no cost).
func streamDescs(tenant string, estimate, cost int64, end bool) []*rlcommon.RateLimitDescriptor {
	d := func(n int64, neg bool) *rlcommon.RateLimitDescriptor {
		x := &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}}}
		x.HitsAddend, x.IsNegativeHits = wrapperspb.UInt64(uint64(n)), neg
		return x
	}
	switch {
	case !end:
		return []*rlcommon.RateLimitDescriptor{d(estimate, false)}
	case cost < 0:
		return []*rlcommon.RateLimitDescriptor{d(estimate, true)}
	}
	return []*rlcommon.RateLimitDescriptor{d(cost, false), d(estimate, true)}
}

const giveBackPolicy = `schema:
  llm:
    children:
      tenant:
        children:
          "*": {limits: {algorithm: fixed_window, limit: 1000, window: 1h}}
`

// TestGRPCGivesBackOnlyWhatAStartTook: over a real RLS client, on both
// stores, the stream-done pair of docs/usage-budgets.md (the real cost,
// and the estimate with is_negative_hits) gives back only what an
// admitted start took, in the window it took it: (a) a start denied, then
// its end (the pair, or the estimate alone) gives nothing back, and the
// budget stays spent (before: 1,000 regained of 1,000); (b) a start at
// 59 min, ended at 61 min, gives nothing to the new window (before: 500
// of its 1,000 again); (c) a start ended in its own window gives back
// exactly the difference.
func TestGRPCGivesBackOnlyWhatAStartTook(t *testing.T) {
	for _, where := range []string{"memory", "redis"} {
		t.Run(where, func(t *testing.T) {
			now, rls := movedServer(t, where, giveBackPolicy)
			t0 := time.Unix(1_800_000_000, 0) // on the hour
			at := func(d time.Duration) { now.Store(t0.Add(d).UnixMicro()) }
			call := func(ds []*rlcommon.RateLimitDescriptor) bool {
				t.Helper()
				r, err := rls.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "llm", Descriptors: ds})
				if err != nil {
					t.Fatal(err)
				}
				return r.OverallCode == rlv3.RateLimitResponse_OK
			}
			start := func(tenant string, n int64) bool { return call(streamDescs(tenant, n, 0, false)) }
			end := func(tenant string, n, cost int64) { call(streamDescs(tenant, n, cost, true)) }

			// (a) The whole budget admitted and used; then a huge estimate,
			// denied, whose end Envoy still sends.
			at(time.Minute)
			if !start("a", 1000) {
				t.Fatal("a start of the whole budget denied")
			}
			end("a", 1000, 1000)
			if start("a", 1000) {
				t.Fatal("a start past the budget admitted")
			}
			end("a", 1000, 0)  // the denied one's end: cost 0, estimate back
			end("a", 1000, -1) // and the estimate alone
			if start("a", 1) {
				t.Error("(a) a denied start's end gave back what it never took: a start of 1 admitted on a spent budget")
			}

			// (b) A start at 59 min, its end in the next window, once that
			// window is spent.
			at(59 * time.Minute)
			if !start("b", 600) {
				t.Fatal("(b) start denied")
			}
			at(60*time.Minute + time.Second)
			if !start("b", 1000) {
				t.Fatal("(b) the new window's start denied")
			}
			at(61 * time.Minute)
			end("b", 600, 100)
			if start("b", 1) {
				t.Error("(b) a start of the last window gave back to the new one")
			}

			// (c) Ended in its own window: exactly the difference back.
			at(2*time.Hour + time.Minute)
			if !start("c", 600) || !start("c", 400) {
				t.Fatal("(c) starts denied")
			}
			at(2*time.Hour + 2*time.Minute)
			end("c", 600, 100)
			if !start("c", 500) {
				t.Error("(c) 500 of the estimate not given back")
			}
			if start("c", 1) {
				t.Error("(c) more than the difference given back")
			}

			// (d) A stream held open while a denied request's end takes its
			// ticket: the held stream's end, finding none, is recorded in
			// full (before: only its excess, so 900 used cost nothing).
			at(3*time.Hour + time.Minute)
			if !start("d", 1000) {
				t.Fatal("(d) the held stream's start denied")
			}
			if start("d", 1000) {
				t.Fatal("(d) a start past the budget admitted")
			}
			end("d", 1000, 0) // the denied one's end takes the held stream's ticket
			at(3*time.Hour + 2*time.Minute)
			end("d", 1000, 900) // the held stream's end: 900 used
			if start("d", 101) {
				t.Error("(d) the held stream's 900 went uncounted: 101 admitted of the 100 left")
			}
			if !start("d", 100) {
				t.Error("(d) more than the held stream's 900 recorded")
			}
		})
	}
}

// TestGRPCSettleAcrossAWindow: 100 per 4 s, over a real RLS client on both
// stores: ten streams start with an estimate of 10 at 3.0 s (the whole
// limit); in the next window their ten ends (a cost of 0) race 100
// starts of 1, then 100 more: at most 100 are admitted in that window, as
// each end gives back only to the window its start counted in.
func TestGRPCSettleAcrossAWindow(t *testing.T) {
	const policy = `schema:
  llm:
    children:
      tenant:
        children:
          "*": {limits: {algorithm: fixed_window, limit: 100, window: 4s}}
`
	for _, where := range []string{"memory", "redis"} {
		t.Run(where, func(t *testing.T) {
			now, rls := movedServer(t, where, policy)
			t0 := time.Unix(1_800_000_000, 0)
			call := func(ds []*rlcommon.RateLimitDescriptor) bool {
				r, err := rls.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "llm", Descriptors: ds})
				if err != nil {
					t.Error(err)
					return false
				}
				return r.OverallCode == rlv3.RateLimitResponse_OK
			}
			now.Store(t0.Add(3 * time.Second).UnixMicro())
			for i := range 10 {
				if !call(streamDescs("w", 10, 0, false)) {
					t.Fatalf("start %d denied", i)
				}
			}
			now.Store(t0.Add(4 * time.Second).UnixMicro())
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for i := range 110 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if i < 10 {
						call(streamDescs("w", 10, 0, true))
						return
					}
					if call(streamDescs("w", 1, 0, false)) {
						admitted.Add(1)
					}
				}()
			}
			wg.Wait()
			for range 100 {
				if call(streamDescs("w", 1, 0, false)) {
					admitted.Add(1)
				}
			}
			if got := admitted.Load(); got > 100 {
				t.Fatalf("%d admitted in a window of 100", got)
			}
		})
	}
}
