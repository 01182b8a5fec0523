package server

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// acks records the ACKs and NACKs a management server receives.
type acks struct {
	serverv3.CallbackFuncs
	mu    sync.Mutex
	nacks []string
	acked []string // versions acknowledged
}

func (a *acks) request(_ int64, r *discoverygrpc.DiscoveryRequest) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.ErrorDetail != nil {
		a.nacks = append(a.nacks, r.ErrorDetail.Message)
	} else if r.VersionInfo != "" {
		a.acked = append(a.acked, r.VersionInfo)
	}
	return nil
}

// TestXDS: Sluice takes its policy from an xDS management server built on
// go-control-plane's snapshot cache (as Envoy Gateway serves its rate
// limit service's): it answers a real RLS client by a first
// RateLimitConfig, then by a second version, and refuses (NACKs, with the
// reason) a broken third, keeping the second.
func TestXDS(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	cb := &acks{}
	cb.CallbackFuncs.StreamRequestFunc = cb.request
	xds := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(xds, serverv3.NewServer(ctx, cache, cb))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go xds.Serve(ln)
	defer xds.Stop()
	push := func(version string, perSecond uint32, unit rlsconfv3.RateLimitUnit) {
		t.Helper()
		conf := &rlsconfv3.RateLimitConfig{Name: "gateway", Domain: "gw", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key:       "tenant",
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: perSecond},
		}}}
		snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: {conf}})
		if err != nil {
			t.Fatal(err)
		}
		if err := cache.SetSnapshot(ctx, "sluice-test", snap); err != nil {
			t.Fatal(err)
		}
	}
	// waitFor polls until cond holds: the update is asynchronous.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for start := time.Now(); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Since(start) > time.Minute {
				t.Fatalf("no %s within a minute", what)
			}
		}
	}
	push("1", 2, rlsconfv3.RateLimitUnit_HOUR)
	s := serveForTest(t, Config{Store: "memory", GRPC: "127.0.0.1:0", HTTP: "off", XDSServer: ln.Addr().String(), XDSNodeID: "sluice-test"})
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlv3.NewRateLimitServiceClient(conn)
	check := func(tenant string) *rlv3.RateLimitResponse {
		t.Helper()
		r, err := rls.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "gw", Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", tenant)}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	acked := func(v string) func() bool {
		return func() bool {
			cb.mu.Lock()
			defer cb.mu.Unlock()
			return len(cb.acked) > 0 && cb.acked[len(cb.acked)-1] == v
		}
	}
	waitFor("ACK of version 1", acked("1"))
	for i, want := range []rlv3.RateLimitResponse_Code{rlv3.RateLimitResponse_OK, rlv3.RateLimitResponse_OK, rlv3.RateLimitResponse_OVER_LIMIT} {
		if r := check("acme"); r.OverallCode != want || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 2 {
			t.Fatalf("version 1, check %d: %v", i, r)
		}
	}

	push("2", 5, rlsconfv3.RateLimitUnit_HOUR)
	waitFor("ACK of version 2", acked("2"))
	if r := check("bravo"); r.OverallCode != rlv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 5 {
		t.Fatalf("version 2: %v", r)
	}

	push("3", 5, rlsconfv3.RateLimitUnit_UNKNOWN) // a limit without a unit
	waitFor("NACK of version 3", func() bool {
		cb.mu.Lock()
		defer cb.mu.Unlock()
		return len(cb.nacks) > 0
	})
	cb.mu.Lock()
	nack := cb.nacks[0]
	cb.mu.Unlock()
	if !strings.Contains(nack, "unit") {
		t.Errorf("the NACK does not say what is wrong: %q", nack)
	}
	if r := check("bravo"); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 5 || r.Statuses[0].LimitRemaining != 3 {
		t.Fatalf("after a refused version 3, version 2 is not in force: %v", r)
	}
}
