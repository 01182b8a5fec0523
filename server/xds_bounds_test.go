package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// usersConfig is a domain "gw" of n descriptors user=u0 … u<n-1>, each
// perMinute a minute, as Envoy Gateway would send one per tenant.
func usersConfig(n int, perMinute uint32, unit rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitConfig {
	ds := make([]*rlsconfv3.RateLimitDescriptor, n)
	for i := range ds {
		ds[i] = &rlsconfv3.RateLimitDescriptor{Key: "user", Value: fmt.Sprintf("u%d", i),
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: perMinute}}
	}
	return &rlsconfv3.RateLimitConfig{Name: "gateway", Domain: "gw", Descriptors: ds}
}

// TestXDSLargeAndFirst (issue 54, items 6 and 7), against a management
// server built on go-control-plane's snapshot cache: until a first valid
// configuration, ShouldRateLimit answers UNAVAILABLE "no rate limit
// configuration loaded" and /readyz 503, as envoyproxy/ratelimit does,
// also after a refused first one (which left every request OK); a domain
// of 10,000 descriptors (refused before as "more than 100000 nodes") is
// taken and limits; an update of 100,000 descriptors (1.9 MB, which took
// 2.2-2.5 GB) is taken within 600 MB allocated by the whole process (management server included).
func TestXDSLargeAndFirst(t *testing.T) {
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
	push := func(version string, conf *rlsconfv3.RateLimitConfig) {
		t.Helper()
		snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: {conf}})
		if err != nil {
			t.Fatal(err)
		}
		if err := cache.SetSnapshot(ctx, "sluice-test", snap); err != nil {
			t.Fatal(err)
		}
	}
	// waitFor's bound is a hang detector: under -race, on two cores
	// busy with other work, taking 100,000 descriptors once took more
	// than two minutes (test.sh gives a package 30).
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for start := time.Now(); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Since(start) > 10*time.Minute {
				t.Fatalf("no %s within ten minutes", what)
			}
		}
	}
	acked := func(v string) func() bool {
		return func() bool {
			cb.mu.Lock()
			defer cb.mu.Unlock()
			return len(cb.acked) > 0 && cb.acked[len(cb.acked)-1] == v
		}
	}
	nacks := func() int {
		cb.mu.Lock()
		defer cb.mu.Unlock()
		return len(cb.nacks)
	}

	s := serveForTest(t, Config{Store: "memory", GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", XDSServer: ln.Addr().String(), XDSNodeID: "sluice-test"})
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlv3.NewRateLimitServiceClient(conn)
	check := func(user string) (*rlv3.RateLimitResponse, error) {
		return rls.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "gw", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", user)}})
	}
	ready := func() (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + s.HTTPAddr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	waiting := func(when, reason string) {
		t.Helper()
		_, err := check("u7")
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no rate limit configuration loaded: "+reason) {
			t.Errorf("%s: ShouldRateLimit answers %v, want UNAVAILABLE: no rate limit configuration loaded: %s", when, err, reason)
		}
		if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, reason) {
			t.Errorf("%s: /readyz answers %d %q", when, code, body)
		}
	}

	waiting("before any configuration", "waiting for the xDS server's first configuration")
	push("1", usersConfig(10, 3, rlsconfv3.RateLimitUnit_UNKNOWN)) // no unit: refused
	waitFor("NACK of version 1", func() bool { return nacks() > 0 })
	waiting("after a refused first configuration", "the xDS server's configuration was refused: ")

	// A domain of 10,000 descriptors: taken, and it limits.
	push("2", usersConfig(10_000, 3, rlsconfv3.RateLimitUnit_MINUTE))
	waitFor("ACK of version 2", acked("2"))
	// 8 requests within one minute of the clock (the drop-in's windows
	// are the clock's): a round that a minute's end cut is played again
	// on another descriptor.
	for round := 0; ; round++ {
		start, ok := time.Now().Truncate(time.Minute), 0
		for range 8 {
			r, err := check(fmt.Sprintf("u%d", 9999-round))
			if err != nil {
				t.Fatal(err)
			}
			if r.OverallCode == rlv3.RateLimitResponse_OK {
				ok++
			}
		}
		if !time.Now().Truncate(time.Minute).Equal(start) && round < 3 {
			continue
		}
		if ok != 3 {
			t.Errorf("%d of 8 requests OK on a descriptor of 3 a minute", ok)
		}
		break
	}
	if code, body := ready(); code != http.StatusOK {
		t.Errorf("/readyz answers %d %q with a configuration in force", code, body)
	}

	// An update of 100,000 descriptors.
	big := usersConfig(100_000, 5, rlsconfv3.RateLimitUnit_HOUR)
	size := proto.Size(big)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	push("3", big)
	waitFor("ACK of version 3", acked("3"))
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("an update of 100,000 descriptors, %d bytes: %d MB allocated by the process (management server included)", size, allocated>>20)
	if allocated > 600<<20 {
		t.Errorf("an update of 100,000 descriptors (%d bytes) allocated %d MB, want at most 600 MB", size, allocated>>20)
	}
	if r, err := check("u99999"); err != nil || r.OverallCode != rlv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 5 {
		t.Errorf("after the update of 100,000 descriptors: %v, %v", r, err)
	}
}
