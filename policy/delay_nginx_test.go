package policy

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/proxytest"
)

// The anchor of delay: nginx's limit_req with burst and delay, and the
// node that is its equivalent. nginx's `rate=10r/s burst=20 delay=5` lets
// 1+5 requests through at once, delays the next 15 until they conform to
// the rate (the k-th of a burst by (k-6)·100 ms) and rejects the rest: a
// GCRA of 10 a second with burst 5 (6 at once) and delay: {max: 1.5s}.
const nginxDelaySite = `
limit_req_zone $binary_remote_addr zone=z:1m rate=10r/s;
log_format delay '$msec $request_time $limit_req_status $status $arg_i';
server {
    listen %s;
    access_log %s delay;
    location / {
        limit_req zone=z burst=20 delay=5;
        limit_req_status 429;
        root %s;
    }
}
`

const delayPolicy = `
schema:
  ip:
    children:
      "*":
        limits: {algorithm: gcra, burst: 5, count: 10, period: 1s}
        delay: {max: 1500ms}
`

// TestNginxLimitReqDelay sends one arrival trace of bursts and gaps
// through a real nginx and decides the same arrivals (the times nginx
// logged, to the millisecond) with the equivalent node, and compares
// request by request which pass at once, which are delayed and which are
// rejected. Requests that arrive in the same millisecond are compared as
// a group (nginx's order among them is its own). Tolerance: none on the
// outcome; a delay is checked from below only (nginx waits at least
// Sluice's delay, less 1 ms of its clock's resolution): nginx may be late,
// and a test must not hang on the scheduler being on time. The trace's
// gaps sit 50 ms away from the 100 ms steps of the rate, so that no
// arrival lies within a few milliseconds of a boundary.
func TestNginxLimitReqDelay(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ok.txt"), []byte("ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := proxytest.FreeAddr(t)
	logPath := filepath.Join(dir, "access.log")
	ngx := proxytest.Nginx(t, fmt.Sprintf(nginxDelaySite, addr, logPath, dir), addr)

	// The trace: offsets in ms of each request from the start.
	var offsets []int
	burst := func(at, n int) {
		for range n {
			offsets = append(offsets, at)
		}
	}
	burst(0, 25)
	burst(1550, 10)
	for i := range 8 {
		offsets = append(offsets, 2350+50*i)
	}
	burst(4250, 30)

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, MaxConnsPerHost: 0}}
	start := time.Now()
	var wg sync.WaitGroup
	for i, off := range offsets {
		wg.Go(func() {
			time.Sleep(time.Until(start.Add(time.Duration(off) * time.Millisecond)))
			resp, err := client.Get(fmt.Sprintf("http://%s/ok.txt?i=%d", addr, i))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		})
	}
	wg.Wait()

	type arrival struct {
		i       int
		at      int64  // ms since the epoch, when nginx had the request
		took    int64  // ms nginx held it
		outcome string // PASSED, DELAYED or REJECTED
	}
	var arrivals []arrival
	for line := range readLines(t, logPath, len(offsets)) {
		f := strings.Fields(line)
		if len(f) != 5 {
			t.Fatalf("log line %q", line)
		}
		msec, _ := strconv.ParseFloat(f[0], 64)
		took, _ := strconv.ParseFloat(f[1], 64)
		i, _ := strconv.Atoi(f[4])
		end := int64(msec*1000 + 0.5)
		arrivals = append(arrivals, arrival{i: i, at: end - int64(took*1000+0.5), took: int64(took*1000 + 0.5), outcome: f[2]})
	}
	slices.SortStableFunc(arrivals, func(a, b arrival) int { return cmp.Compare(a.at, b.at) })

	c := memoryChecker(t, delayPolicy)
	type outcome struct {
		kind  string
		delay time.Duration
	}
	decide := func(at int64) outcome {
		var d Decision
		if err := c.Decide(context.Background(), &Query{Time: time.UnixMilli(at), Paths: []PathQuery{{Path: []string{"ip", "127.0.0.1"}, Cost: 1}}}, &d); err != nil {
			t.Fatal(err)
		}
		switch {
		case !d.Allowed:
			return outcome{kind: "REJECTED"}
		case d.Delay > 0:
			return outcome{kind: "DELAYED", delay: d.Delay}
		}
		return outcome{kind: "PASSED"}
	}
	counts := map[string]int{}
	for g := 0; g < len(arrivals); {
		e := g
		for e < len(arrivals) && arrivals[e].at == arrivals[g].at {
			e++
		}
		var ours []outcome
		var theirs []arrival
		for _, a := range arrivals[g:e] {
			ours = append(ours, decide(a.at))
			theirs = append(theirs, a)
		}
		order := map[string]int{"PASSED": 0, "DELAYED": 1, "REJECTED": 2}
		slices.SortFunc(ours, func(a, b outcome) int {
			return cmp.Or(cmp.Compare(order[a.kind], order[b.kind]), cmp.Compare(a.delay, b.delay))
		})
		slices.SortFunc(theirs, func(a, b arrival) int {
			return cmp.Or(cmp.Compare(order[a.outcome], order[b.outcome]), cmp.Compare(a.took, b.took))
		})
		for k := range ours {
			a := theirs[k]
			counts[a.outcome]++
			if ours[k].kind != a.outcome {
				t.Errorf("request %d at %d ms: nginx %s, Sluice %s", a.i, a.at-arrivals[0].at, a.outcome, ours[k].kind)
				continue
			}
			if a.outcome == "DELAYED" && time.Duration(a.took)*time.Millisecond < ours[k].delay-time.Millisecond {
				t.Errorf("request %d at %d ms: nginx held it %d ms, Sluice's delay is %v", a.i, a.at-arrivals[0].at, a.took, ours[k].delay)
			}
		}
		g = e
	}
	t.Logf("nginx and Sluice agree on %d requests: %v", len(arrivals), counts)
	if counts["PASSED"] == 0 || counts["DELAYED"] == 0 || counts["REJECTED"] == 0 {
		t.Errorf("the trace did not exercise every outcome: %v\n%s", counts, ngx.Output())
	}
}

// readLines returns the first n lines of the file at path, waiting for
// nginx to write them (it logs a request when it answers it, and every
// request has been answered).
func readLines(t *testing.T, path string, n int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				lines = append(lines, sc.Text())
			}
			f.Close()
			if len(lines) >= n {
				for _, l := range lines[:n] {
					if !yield(l) {
						return
					}
				}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
