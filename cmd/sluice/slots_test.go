package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/redistest"
)

// slotsServePolicy limits exports per tenant over HTTP, and streams per
// tenant over Envoy's protocol (domain edge, descriptor tenant).
const slotsServePolicy = `
schema:
  exports:
    children:
      "*": {limits: [{algorithm: concurrency, limit: 2, hold_for: 30s}]}
  edge:
    children:
      tenant:
        children:
          "*": {limits: [{algorithm: concurrency, limit: 2, hold_for: 30s}]}
`

// TestServeSlots: sluice serve on each store: a check takes a slot and
// answers its permit; the admin view lists the holder and its lease; the
// permit renews and releases; Envoy's streams take slots for no permit,
// listed too, and is_negative_hits gives them back.
func TestServeSlots(t *testing.T) {
	rd := redistest.Start(t)
	const token = "slots-admin"
	for _, storeURL := range []string{"memory", rd.URL()} {
		t.Run(storeURL, func(t *testing.T) {
			p := serve(t, []string{"SLUICE_ADMIN_TOKEN=" + token}, append(local, "--store", storeURL, "--policy", policyFile(t, slotsServePolicy))...)
			base := "http://" + p.http
			a := p.check(`{"path": ["exports", "acme"]}`)
			d := a.decision(t)
			if a.status != 200 || d.Permit == "" || a.header.Get("RateLimit") != `"exports/*";r=1;t=30` {
				t.Fatalf("check: %d %v %s", a.status, a.header, a.body)
			}
			type level struct { // GET /admin/v1/holders
				Held    int64 `json:"held"`
				Holders []struct {
					Permit string `json:"permit"`
					Units  int64  `json:"units"`
					LeftNs int64  `json:"lease_left_ns"`
				} `json:"holders"`
			}
			holders := func(path string) level {
				t.Helper()
				a := do(t, "GET", base+"/admin/v1/holders?"+path, token, "")
				var h struct {
					Levels []level `json:"levels"`
				}
				if err := json.Unmarshal(a.body, &h); err != nil || a.status != 200 || len(h.Levels) != 1 {
					t.Fatalf("holders: %d %s %v", a.status, a.body, err)
				}
				return h.Levels[0]
			}
			lv := holders("path=exports&path=acme")
			if lv.Held != 1 || len(lv.Holders) != 1 || lv.Holders[0].Permit != d.Permit || lv.Holders[0].Units != 1 ||
				lv.Holders[0].LeftNs <= 0 || lv.Holders[0].LeftNs > int64(30*time.Second) {
				t.Fatalf("holders: %+v", lv)
			}
			slot := fmt.Sprintf(`{"path": ["exports", "acme"], "permit": %q}`, d.Permit)
			if a := do(t, "POST", base+"/v1/renew", "", slot); a.status != 200 {
				t.Fatalf("renew: %d %s", a.status, a.body)
			}
			if a := do(t, "POST", base+"/v1/release", "", slot); a.status != 200 || a.decision(t).Remaining != 2 {
				t.Fatalf("release: %d %s", a.status, a.body)
			}
			if a := do(t, "POST", base+"/v1/renew", "", slot); a.status != 404 {
				t.Fatalf("renew after release: %d %s", a.status, a.body)
			}
			if lv := holders("path=exports&path=acme"); lv.Held != 0 || len(lv.Holders) != 0 {
				t.Fatalf("holders after release: %+v", lv)
			}

			c := p.rls(t)
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			stream := func(neg bool) rlv3.RateLimitResponse_Code {
				r, err := c.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
					{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}}, IsNegativeHits: neg}}})
				if err != nil {
					t.Fatal(err)
				}
				return r.OverallCode
			}
			if stream(false) != rlv3.RateLimitResponse_OK || stream(false) != rlv3.RateLimitResponse_OK || stream(false) != rlv3.RateLimitResponse_OVER_LIMIT {
				t.Fatal("three streams on two slots")
			}
			if lv := holders("path=edge&path=tenant&path=acme"); lv.Held != 2 || len(lv.Holders) != 2 || lv.Holders[0].Permit != "" {
				t.Fatalf("Envoy's holders: %+v", lv)
			}
			if stream(true) != rlv3.RateLimitResponse_OK || stream(false) != rlv3.RateLimitResponse_OK {
				t.Fatal("a stream's end did not free its slot")
			}
		})
	}
}
