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
//
// $arrive is nginx's cached clock when the request reached the rewrite
// phase, the same event-loop turn (the same cached time) as limit_req,
// which runs next; $msec-$request_time would be the request's creation,
// an earlier turn when the request line came in more than one read.
const nginxDelaySite = `
limit_req_zone $binary_remote_addr zone=z:1m rate=10r/s;
log_format delay '$arrive $msec $limit_req_status $status $arg_i';
server {
    listen %s;
    access_log %s delay;
    location / {
        set $arrive $msec;
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
// a group (nginx's order among them is its own). The trace's gaps sit 50
// ms away from the 100 ms steps of the rate, and its last part arrives
// every 2 ms across steps; on a busy machine the requests go late and
// land elsewhere, which changes the trace but not the comparison (it
// replays nginx's own arrivals).
//
// Tolerance: none on the outcome, and one millisecond of time. limit_req
// reads ngx_current_msec, CLOCK_MONOTONIC truncated to the ms, and the
// log has only the wall clock (CLOCK_REALTIME) of the same update, also
// truncated: their sub-millisecond phases differ, so a logged arrival is
// limit_req's, shifted by the same constant for the whole run, give or
// take 1 ms. A group that does not agree at its logged millisecond is
// decided again at the one before and the one after, on a copy of the
// state from before it (the accepted times replayed on a new Checker);
// it must agree at one of the three, and the next groups are decided on
// the state that agreed. A delay is checked from below only (nginx holds
// a request at least Sluice's delay, less 1 ms of its clock's
// resolution): nginx may be late, and a test must not hang on the
// scheduler being on time.
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
	// With the bucket full, one every 2 ms for 300 ms: each 100 ms step
	// of the rate admits the first arrival at or after it and rejects
	// the one 2 ms before it, so that Sluice's boundaries are compared to
	// nginx's to within the 1 ms of tolerance.
	for i := range 150 {
		offsets = append(offsets, 4650+2*i)
	}

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

	var arrivals []nginxArrival
	var logged []string
	for line := range readLines(t, logPath, len(offsets)) {
		logged = append(logged, line)
		f := strings.Fields(line)
		if len(f) != 5 {
			t.Fatalf("log line %q", line)
		}
		arrive, err1 := strconv.ParseFloat(f[0], 64)
		end, err2 := strconv.ParseFloat(f[1], 64)
		i, err3 := strconv.Atoi(f[4])
		if err := cmp.Or(err1, err2, err3); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		at := int64(arrive*1000 + 0.5)
		arrivals = append(arrivals, nginxArrival{i: i, at: at, took: int64(end*1000+0.5) - at, outcome: f[2]})
	}
	slices.SortStableFunc(arrivals, func(a, b nginxArrival) int { return cmp.Compare(a.at, b.at) })

	counts := map[string]int{}
	shifted := 0
	replay := newDelayReplay(t)
	for g := 0; g < len(arrivals); {
		e := g
		for e < len(arrivals) && arrivals[e].at == arrivals[g].at {
			e++
		}
		group := slices.Clone(arrivals[g:e])
		slices.SortFunc(group, func(a, b nginxArrival) int {
			return cmp.Or(cmp.Compare(outcomeOrder[a.outcome], outcomeOrder[b.outcome]), cmp.Compare(a.took, b.took))
		})
		at := group[0].at
		ours := replay.decide(at, len(group))
		mismatch := compareGroup(group, ours)
		for _, shift := range []int64{-1, 1} {
			if mismatch == "" {
				break
			}
			// A copy of the state from before the group, the group at
			// the neighbouring millisecond.
			other := newDelayReplay(t)
			for _, p := range replay.played[:len(replay.played)-len(group)] {
				other.decide(p, 1)
			}
			if compareGroup(group, other.decide(at+shift, len(group))) == "" {
				replay, mismatch = other, ""
				shifted++
			}
		}
		if mismatch != "" {
			t.Errorf("at %d ms (and at 1 ms either side): %s", at-arrivals[0].at, mismatch)
		}
		for _, a := range group {
			counts[a.outcome]++
		}
		g = e
	}
	if t.Failed() {
		t.Logf("nginx's log ($arrive $msec $limit_req_status $status $arg_i):\n%s", strings.Join(logged, "\n"))
	}
	t.Logf("%d requests compared (groups decided 1 ms off their logged time: %d): %v", len(arrivals), shifted, counts)
	if counts["PASSED"] == 0 || counts["DELAYED"] == 0 || counts["REJECTED"] == 0 {
		t.Errorf("the trace did not exercise every outcome: %v\n%s", counts, ngx.Output())
	}
}

// nginxArrival is one request of nginx's access log.
type nginxArrival struct {
	i       int
	at      int64  // ms since the epoch, nginx's clock when limit_req had the request
	took    int64  // ms nginx held it, arrival to answer
	outcome string // PASSED, DELAYED or REJECTED
}

// nginxOutcome is Sluice's decision in nginx's words.
type nginxOutcome struct {
	kind  string
	delay time.Duration
}

var outcomeOrder = map[string]int{"PASSED": 0, "DELAYED": 1, "REJECTED": 2}

// delayReplay decides delayPolicy's requests at explicit times on a
// memory Checker and keeps the times it played, so that a copy of its
// state can be made by replaying them.
type delayReplay struct {
	t      *testing.T
	c      *Checker
	played []int64
}

func newDelayReplay(t *testing.T) *delayReplay {
	return &delayReplay{t: t, c: memoryChecker(t, delayPolicy)}
}

// decide decides n requests at ms since the epoch, sorted as compareGroup
// wants them.
func (r *delayReplay) decide(at int64, n int) []nginxOutcome {
	var ours []nginxOutcome
	for range n {
		var d Decision
		if err := r.c.Decide(context.Background(), &Query{Time: time.UnixMilli(at), Paths: []PathQuery{{Path: []string{"ip", "127.0.0.1"}, Cost: 1}}}, &d); err != nil {
			r.t.Fatal(err)
		}
		r.played = append(r.played, at)
		switch {
		case !d.Allowed:
			ours = append(ours, nginxOutcome{kind: "REJECTED"})
		case d.Delay > 0:
			ours = append(ours, nginxOutcome{kind: "DELAYED", delay: d.Delay})
		default:
			ours = append(ours, nginxOutcome{kind: "PASSED"})
		}
	}
	slices.SortFunc(ours, func(a, b nginxOutcome) int {
		return cmp.Or(cmp.Compare(outcomeOrder[a.kind], outcomeOrder[b.kind]), cmp.Compare(a.delay, b.delay))
	})
	return ours
}

// compareGroup says how Sluice's decisions of a group of same-millisecond
// arrivals differ from nginx's ("" when they agree): the same outcomes,
// and no delay longer than nginx held the request (less 1 ms of its
// clock's resolution). Both are sorted by outcome, then delay or hold.
func compareGroup(theirs []nginxArrival, ours []nginxOutcome) string {
	var b strings.Builder
	for k, a := range theirs {
		switch {
		case ours[k].kind != a.outcome:
			fmt.Fprintf(&b, "request %d: nginx %s, Sluice %s; ", a.i, a.outcome, ours[k].kind)
		case a.outcome == "DELAYED" && time.Duration(a.took)*time.Millisecond < ours[k].delay-time.Millisecond:
			fmt.Fprintf(&b, "request %d: nginx held it %d ms, Sluice's delay is %v; ", a.i, a.took, ours[k].delay)
		}
	}
	return b.String()
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
