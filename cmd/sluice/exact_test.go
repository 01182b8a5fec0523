package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
)

// exactPolicy has, under a loose shared level x, one per-caller node per
// algorithm that admits 37 at once (the gate 1), and a loose node all/1
// for a second gRPC descriptor.
const exactPolicy = `
schema:
  x:
    limits: [{algorithm: fixed_window, limit: 1000000, window: 1h}]
    children:
      gcra:           {children: {"*": {limits: [{algorithm: gcra, burst: 36, count: 1, period: 1h}]}}}
      token_bucket:   {children: {"*": {limits: [{algorithm: token_bucket, burst: 37, rate: 1, per: 1h}]}}}
      fixed_window:   {children: {"*": {limits: [{algorithm: fixed_window, limit: 37, window: 1000h}]}}}
      gate:           {children: {"*": {limits: [{algorithm: gate, interval: 1h}]}}}
      sliding_log:    {children: {"*": {limits: [{algorithm: sliding_log, limits: [{limit: 37, window: 1h}], buckets: 60}]}}}
      window_counter: {children: {"*": {limits: [{algorithm: window_counter, limits: [{limit: 37, window: 1h}], slice: 1m}]}}}
      concurrency:    {children: {"*": {limits: [{algorithm: concurrency, limit: 37, hold_for: 1h}]}}}
      all:            {children: {"1": {limits: [{algorithm: fixed_window, limit: 1000000, window: 1h}]}}}
`

// TestServeExactUnderRaces: 200 concurrent clients on one caller's key
// are admitted exactly the limit, for every algorithm, on both stores,
// over HTTP (two levels: x and x/<algorithm>/*) and over gRPC (two
// descriptors decided together).
func TestServeExactUnderRaces(t *testing.T) {
	rd := redistest.Start(t)
	for _, storeURL := range []string{"memory", rd.URL()} {
		p := serve(t, nil, append(local, "--store", storeURL, "--policy", policyFile(t, exactPolicy))...)
		c := p.rls(t)
		for _, k := range algo.Kinds() {
			want := int64(37)
			if k == algo.KindGate {
				want = 1
			}
			for _, api := range []string{"http", "grpc"} {
				caller := fmt.Sprintf("%s-%s-%s", api, k, strings.SplitN(storeURL, ":", 2)[0])
				var admitted atomic.Int64
				var wg sync.WaitGroup
				for range 200 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if api == "http" {
							resp, err := http.Post("http://"+p.http+"/v1/check", "application/json",
								strings.NewReader(fmt.Sprintf(`{"path": ["x", %q, %q]}`, k.String(), caller)))
							if err != nil {
								t.Error(err)
								return
							}
							resp.Body.Close()
							if resp.StatusCode == 200 {
								admitted.Add(1)
							} else if resp.StatusCode != 429 {
								t.Errorf("status %d", resp.StatusCode)
							}
							return
						}
						ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
						defer cancel()
						r, err := c.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "x", Descriptors: []*rlcommon.RateLimitDescriptor{
							{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: k.String(), Value: caller}}},
							{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "all", Value: "1"}}},
						}})
						if err != nil {
							t.Error(err)
							return
						}
						if r.OverallCode == rlv3.RateLimitResponse_OK {
							admitted.Add(1)
						}
					}()
				}
				wg.Wait()
				if got := admitted.Load(); got != want {
					t.Errorf("%s over %s on %s: %d admitted, want %d", k, api, storeURL, got, want)
				}
			}
		}
	}
}
