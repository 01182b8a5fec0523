package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
)

// clockStore is a store whose clock the test sets: every decision,
// ticket and settle without a time of its own is at it, as the store's
// clock (Redis TIME) would place them, so that no window rolls over but
// when the test moves it.
type clockStore struct {
	store.Store
	now *atomic.Int64 // µs
}

func (c clockStore) at(t time.Time) time.Time {
	if t.IsZero() {
		return time.UnixMicro(c.now.Load())
	}
	return t
}

func (c clockStore) Now(context.Context) (time.Time, error) { return c.at(time.Time{}), nil }

func (c clockStore) DecideAll(ctx context.Context, reqs []store.Request, res []algo.Result) (bool, error) {
	for i := range reqs {
		reqs[i].Time = c.at(reqs[i].Time)
	}
	return c.Store.DecideAll(ctx, reqs, res)
}

func (c clockStore) Issue(ctx context.Context, t store.Request, ttl time.Duration) error {
	t.Time = c.at(t.Time)
	return c.Store.(store.Settler).Issue(ctx, t, ttl)
}

func (c clockStore) Settle(ctx context.Context, t store.Request, reqs []store.Request, op algo.Adjust) (bool, error) {
	t.Time = c.at(t.Time)
	return c.Store.(store.Settler).Settle(ctx, t, reqs, op)
}

// TestRecipeLLMGateway: docs/recipes.md's LLM gateway, its limits.yaml
// and its two calls as they are, against a real server on Redis and on
// the memory store: a call is one round trip before it (its call and its
// tokens' estimate, one decision) and one to settle (the real cost per
// path). The settle gives back the tokens not used; the 21st call of a
// minute is denied and estimates no tokens; a response past max_tokens is
// charged its excess, past the budget, after which a call is denied and
// counts no call; the budget is a calendar month in Berlin, fresh at its
// midnight (by Go's tz database) and not a second before.
func TestRecipeLLMGateway(t *testing.T) {
	page, err := os.ReadFile("../docs/recipes.md")
	if err != nil {
		t.Fatal(err)
	}
	block := func(lang, name string) string {
		m := regexp.MustCompile("(?s)```" + lang + "\n# recipes: " + regexp.QuoteMeta(name) + "\n(.*?)```").FindSubmatch(page)
		if m == nil {
			t.Fatalf("docs/recipes.md has no %s block", name)
		}
		return string(m[1])
	}
	limits := block("yaml", "gateway limits.yaml")
	// The two calls: each a curl line, with its answer on the next line.
	type call struct{ path, body, answer string }
	var calls []call
	lines := regexp.MustCompile(`(?m)^curl -s localhost:8080(/v1/[a-z]+) -d '(.*)'\n# (.*)$`).FindAllStringSubmatch(block("sh", "gateway calls"), -1)
	for _, l := range lines {
		calls = append(calls, call{l[1], l[2], l[3]})
	}
	if len(calls) != 2 || calls[0].path != "/v1/check" || calls[1].path != "/v1/settle" {
		t.Fatalf("the recipe's calls: want a check, then a settle: %q", calls)
	}
	var check struct {
		Paths [][]string `json:"paths"`
		Costs []int64    `json:"costs"`
	}
	var settle struct {
		SettleID string  `json:"settle_id"`
		Costs    []int64 `json:"costs"`
	}
	if json.Unmarshal([]byte(calls[0].body), &check) != nil || json.Unmarshal([]byte(calls[1].body), &settle) != nil || len(check.Costs) != 2 || len(settle.Costs) != 2 {
		t.Fatalf("the recipe's bodies: %q", calls)
	}
	const budget, perMinute = 1000000, 20
	estimated, used := check.Costs[1], settle.Costs[1] // 4,000 and 1,250 tokens

	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, where := range []string{"memory", "redis"} {
		t.Run(where, func(t *testing.T) {
			cfg := Config{Store: "memory", HTTP: "127.0.0.1:0", GRPC: "off", PolicyData: []byte(limits), PolicyName: "limits.yaml", Timeout: testTimeout}
			if where == "redis" {
				cfg.Store = redistest.Start(t).URL()
			}
			s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			now := new(atomic.Int64)
			set := func(t time.Time) { now.Store(t.UnixMicro()) }
			set(time.Date(2027, 3, 31, 9, 0, 0, 0, berlin))
			s.store = clockStore{s.store, now}
			s.checker.Store = s.store
			if err := s.Listen(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { s.Serve(ctx, nil); close(done) }()
			t.Cleanup(func() { cancel(); <-done; s.Close() })

			trips := 0
			post := func(path, body string) (int, string) {
				t.Helper()
				trips++
				resp, err := http.Post("http://"+s.HTTPAddr()+path, "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, strings.TrimSpace(string(b))
			}
			// left: what the caller's minute and month have left (a peek,
			// denied when a charge took the month past its budget).
			left := func() (calls, tokens int64) {
				t.Helper()
				var d DecisionJSON
				status, body := post("/v1/check", `{"paths": [["llm", "calls", "alice"], ["llm", "tokens", "alice"]], "cost": 0}`)
				if status != 200 && status != 429 || json.Unmarshal([]byte(body), &d) != nil || len(d.Levels) != 2 {
					t.Fatalf("peek: %d %s", status, body)
				}
				return d.Levels[0].Remaining, d.Levels[1].Remaining
			}
			// play makes one call of the recipe: its check, and when it is
			// admitted its settle at the given real costs.
			play := func(costs ...int64) (checkStatus int, checkBody, settleBody string) {
				t.Helper()
				checkStatus, checkBody = post("/v1/check", calls[0].body)
				if checkStatus != 200 {
					return checkStatus, checkBody, ""
				}
				var d DecisionJSON
				if json.Unmarshal([]byte(checkBody), &d) != nil || !strings.HasPrefix(d.SettleTicket, "e3.") {
					t.Fatalf("check: %s", checkBody)
				}
				body := calls[1].body
				if len(costs) > 0 {
					js, _ := json.Marshal(costs)
					body = regexp.MustCompile(`"costs": \[[^]]*\]`).ReplaceAllString(body, `"costs": `+string(js))
				}
				status, settleBody := post("/v1/settle", strings.Replace(body, settle.SettleID, d.SettleTicket, 1))
				if status != 200 {
					t.Fatalf("settle: %d %s", status, settleBody)
				}
				return checkStatus, checkBody, settleBody
			}

			// The recipe's call: one round trip before, one to settle, and
			// the answers the page shows.
			status, checkBody, settleBody := play()
			if status != 200 || trips != 2 {
				t.Fatalf("the recipe's call: %d, %d round trips", status, trips)
			}
			for _, want := range regexp.MustCompile(`"[a-z_]+":[0-9a-z]+`).FindAllString(calls[0].answer, -1) {
				if !strings.Contains(checkBody, want) {
					t.Errorf("the check answered %s, the page shows %s", checkBody, want)
				}
			}
			if want := strings.TrimPrefix(calls[1].answer, "200 "); settleBody != want {
				t.Errorf("the settle answered %s, the page shows %s", settleBody, want)
			}
			spent := used
			if c, tk := left(); c != perMinute-1 || tk != budget-spent {
				t.Fatalf("after the recipe's call (%d tokens estimated, %d used): %d calls and %d tokens left, want %d and %d", estimated, used, c, tk, perMinute-1, budget-spent)
			}
			// 20 calls a minute: the 21st is denied, and estimates nothing.
			for i := 2; i <= perMinute; i++ {
				if status, body, _ := play(); status != 200 {
					t.Fatalf("call %d of the minute: %d %s", i, status, body)
				}
				spent += used
			}
			if status, body, _ := play(); status != 429 || !strings.Contains(body, `"key":"llm:calls:alice","spec":{"algorithm":"fixed_window","limit":20,"window":"1m0s"},"shadow":false,"allowed":false`) {
				t.Fatalf("the 21st call of the minute: %d %s", status, body)
			}
			if c, tk := left(); c != 0 || tk != budget-spent {
				t.Fatalf("after 20 calls and a denied 21st: %d calls and %d tokens left, want 0 and %d", c, tk, budget-spent)
			}
			// The next minute: a response past the budget is charged in full.
			set(time.Date(2027, 3, 31, 9, 1, 0, 0, berlin))
			if status, _, _ := play(1, budget); status != 200 {
				t.Fatalf("a call in the next minute: %d", status)
			}
			if c, tk := left(); c != perMinute-1 || tk != 0 {
				t.Fatalf("after a response past the budget: %d calls and %d tokens left, want %d and 0", c, tk, perMinute-1)
			}
			// Spent: a call is denied, and counts no call.
			if status, body, _ := play(); status != 429 {
				t.Fatalf("a call on a spent budget: %d %s", status, body)
			}
			if c, _ := left(); c != perMinute-1 {
				t.Fatalf("a call the budget denied counted a call: %d left, want %d", c, perMinute-1)
			}
			// Berlin's month: still spent a second before its midnight
			// (22:00 UTC, summer time), fresh at it.
			april := time.Date(2027, 4, 1, 0, 0, 0, 0, berlin)
			set(april.Add(-time.Second))
			if status, _, _ := play(); status != 429 {
				t.Fatalf("a second before Berlin's April: %d, want 429", status)
			}
			set(april)
			if status, body, _ := play(); status != 200 {
				t.Fatalf("at Berlin's April: %d %s", status, body)
			}
			if c, tk := left(); c != perMinute-1 || tk != budget-used {
				t.Fatalf("April's first call: %d calls and %d tokens left, want %d and %d", c, tk, perMinute-1, budget-used)
			}

			// Bad settles and checks get a 400 that says what is wrong.
			_, body := post("/v1/check", calls[0].body)
			var d DecisionJSON
			json.Unmarshal([]byte(body), &d)
			id, _ := json.Marshal(d.SettleTicket)
			for _, c := range []struct{ path, body, want string }{
				{"/v1/settle", `{"settle_id": ` + string(id) + `, "cost": 1250}`, "2 costs, one per path"},
				{"/v1/settle", `{"settle_id": ` + string(id) + `, "costs": [1]}`, "2 costs, one per path"},
				{"/v1/settle", `{"settle_id": ` + string(id) + `, "costs": [1, -1]}`, "outside 0.."},
				{"/v1/settle", `{"settle_id": ` + string(id) + `, "cost": 1, "costs": [1, 1]}`, "not both"},
				{"/v1/check", `{"paths": [["llm", "calls", "alice"], ["llm", "tokens", "alice"]], "costs": [1], "settle_within": "10m"}`, "one cost per path"},
				{"/v1/check", `{"paths": [["llm", "calls", "alice"], ["llm", "tokens", "alice"]], "costs": [1, -4000]}`, "must not be negative"},
				{"/v1/check", `{"paths": [["llm", "calls", "alice"], ["llm", "tokens", "alice"]], "cost": 1, "costs": [1, 4000]}`, "not both"},
			} {
				if status, body := post(c.path, c.body); status != 400 || !strings.Contains(body, c.want) {
					t.Errorf("%s %s: %d %s, want a 400 saying %q", c.path, c.body, status, body, c.want)
				}
			}
			if status, body := post("/v1/settle", `{"settle_id": `+string(id)+`, "costs": [1, 4000]}`); status != 200 || body != `{"settled":true}` {
				t.Fatalf("the settle after the bad ones: %d %s", status, body)
			}
		})
	}
}
