package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestSettleAfterKill: estimates live in Redis, not in the instance that
// admitted them. 10 estimates of 3,000 tokens are admitted by one `sluice
// serve`; 4 are settled through it at 1,000, then it is SIGKILLed; 3 more
// are settled at 1,000 through a second instance on the same Redis; the 3
// never settled settle at their estimates when their time ends (by Redis's
// clock: a settle after it changes nothing). The budget then holds exactly
// what was used, and no more is admitted than what is left of it.
func TestSettleAfterKill(t *testing.T) {
	rd := redistest.Start(t)
	pol := policyFile(t, `schema:
  ai:
    children:
      key:
        children:
          "*": {limits: {algorithm: fixed_window, limit: 100000, window: 1h}}
`)
	a := serve(t, nil, append(local, "--store", rd.URL(), "--policy", pol)...)
	b := serve(t, nil, append(local, "--store", rd.URL(), "--policy", pol)...)
	for round := 0; ; round++ {
		key := fmt.Sprintf("k%d", round)
		if settleAfterKill(t, rd, a, b, key, time.Now()) {
			return
		}
		// The hour's window rolled over during the round: again, on a
		// fresh key (a killed instance cannot be used twice).
		a = serve(t, nil, append(local, "--store", rd.URL(), "--policy", pol)...)
	}
}

// settleAfterKill plays one round (see TestSettleAfterKill), begun at
// start, and kills a; false when the hour's window rolled over since.
func settleAfterKill(t *testing.T, rd *redistest.Server, a, b *proc, key string, start time.Time) bool {
	rolled := func() bool { return start.Truncate(time.Hour) != time.Now().Truncate(time.Hour) }
	var ids []string
	for i := range 10 {
		// The 7 to settle have 10 minutes, the 3 left 1s: a busy machine
		// takes more than a second to settle 7 and kill an instance.
		within := "10m"
		if i >= 7 {
			within = "1s"
		}
		r := a.check(fmt.Sprintf(`{"path": ["ai", "key", %q], "cost": 3000, "settle_within": %q}`, key, within))
		var d struct {
			SettleID string `json:"settle_id"`
		}
		if r.status != 200 || json.Unmarshal(r.body, &d) != nil || d.SettleID == "" {
			t.Fatalf("estimate %d: %d %s", i, r.status, r.body)
		}
		ids = append(ids, d.SettleID)
	}
	settle := func(p *proc, id string) bool {
		t.Helper()
		r := do(t, "POST", "http://"+p.http+"/v1/settle", "", fmt.Sprintf(`{"settle_id": %q, "cost": 1000}`, id))
		if r.status != 200 {
			t.Fatalf("settle: %d %s", r.status, r.body)
		}
		return strings.Contains(string(r.body), `"settled":true`)
	}
	for _, id := range ids[:4] {
		if !settle(a, id) {
			t.Fatal("a settle through the instance that estimated failed")
		}
	}
	a.signal(syscall.SIGKILL)
	a.wait()
	for _, id := range ids[4:7] {
		if !settle(b, id) {
			t.Fatal("a settle through the other instance, after the first was killed, failed")
		}
	}
	// Wait for Redis to drop the 3 tickets left, by its own clock.
	for {
		out, err := rd.Do("EVAL", "return #redis.call('KEYS', '*%:ticket')", "0")
		if err != nil {
			t.Fatal(err)
		}
		if out == "0" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range ids[7:] {
		if settle(b, id) {
			t.Fatal("an estimate settled after its time")
		}
	}
	// 7 settled at 1,000 and 3 at their 3,000: 16,000 used.
	peek := b.check(fmt.Sprintf(`{"path": ["ai", "key", %q], "cost": 0}`, key))
	if !strings.Contains(string(peek.body), `"remaining":84000`) {
		if rolled() {
			return false
		}
		t.Fatalf("after 7 settled at 1,000 and 3 left at 3,000, want 84,000 remaining: %s", peek.body)
	}
	admitted := 0
	for b.check(fmt.Sprintf(`{"path": ["ai", "key", %q], "cost": 3000}`, key)).status == 200 {
		admitted++
		if admitted > 100 {
			break
		}
	}
	if admitted != 28 && !rolled() {
		t.Fatalf("%d estimates of 3,000 admitted on the 84,000 left, want 28", admitted)
	}
	return !rolled()
}
