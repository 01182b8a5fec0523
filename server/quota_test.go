package server

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestQuotaGrants: a gRPC client that asks for quota (x-sluice-quota) on
// a lease: true node gets RateLimitResponse.Quota, valid no longer than
// lease_for; without asking, on another node or when over the limit it
// gets none. A client that admits a request per OK answer plus every
// request granted never admits more than the limit, and gets close to it.
func TestQuotaGrants(t *testing.T) {
	rd := redistest.Start(t)
	src := `schema:
  edge:
    children:
      remote_address:
        children:
          "*": {lease: true, limits: {algorithm: fixed_window, limit: 1000, window: 1h}}
      plain:
        children:
          "*": {limits: {algorithm: fixed_window, limit: 1000, window: 1h}}
`
	s, err := New(context.Background(), Config{Store: rd.URL(), PolicyData: []byte(src), PolicyName: "t.yaml", Timeout: testTimeout},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := &rateLimitService{s: s}
	ask := metadata.NewIncomingContext(context.Background(), metadata.Pairs(quotaHeader, "100"))
	call := func(ctx context.Context, key string) *rlv3.RateLimitResponse {
		t.Helper()
		resp, err := g.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc(key, "10.0.0.1")}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if q := call(context.Background(), "remote_address").GetQuota(); q != nil {
		t.Fatalf("quota without asking: %v", q)
	}
	if q := call(ask, "plain").GetQuota(); q != nil {
		t.Fatalf("quota on a node without lease: %v", q)
	}
	admitted := int64(1) // the check without asking
	before := time.Now()
	resp := call(ask, "remote_address")
	q := resp.GetQuota()
	if resp.OverallCode != rlv3.RateLimitResponse_OK || q == nil || q.Requests != 100 {
		t.Fatalf("asked for 100: %v", resp)
	}
	if until := q.GetValidUntil().AsTime(); until.Before(before) || until.After(time.Now().Add(time.Second)) {
		t.Fatalf("valid until %v, want within %v of now", until, time.Second)
	}
	admitted += 1 + int64(q.Requests)
	for range 100 {
		resp := call(ask, "remote_address")
		if resp.OverallCode == rlv3.RateLimitResponse_OK {
			admitted += 1 + int64(resp.GetQuota().GetRequests())
		} else if resp.GetQuota() != nil {
			t.Fatal("quota with OVER_LIMIT")
		}
	}
	t.Logf("admitted %d", admitted)
	if admitted > 1000 || admitted < 990 {
		t.Fatalf("a client using every grant admitted %d of a limit of 1000", admitted)
	}
}
