package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/store/redis"
)

// TestQueueEndpoint: POST /v1/queues/{name} on Redis: 201 with an
// id until the capacity, then 429 with Retry-After; an Idempotency-Key
// still queued answers 200 with its entry; unknown queues 404; bad
// bodies 400 and 413; the queue's gauges in /metrics.
func TestQueueEndpoint(t *testing.T) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := Config{Store: "memory", PolicyData: []byte("schema:\n  api: {limits: [1, 1, 1]}\n"), PolicyName: "t.yaml",
		Queues: map[string]QueueConfig{"jobs": {Capacity: 2}}, Timeout: testTimeout}
	if _, err := New(context.Background(), cfg, log); err == nil || !strings.Contains(err.Error(), "queues need a Redis store") {
		t.Fatalf("queues on the memory store: %v", err)
	}
	for _, storeName := range []string{"redis"} {
		t.Run(storeName, func(t *testing.T) {
			cfg.Store = redistest.Start(t).URL()
			s, err := New(context.Background(), cfg, log)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			srv := httptest.NewServer(s.Handler())
			defer srv.Close()
			post := func(path, body string, h ...string) (*http.Response, string) {
				return post(t, srv.URL+path, body, h...)
			}
			resp, body := post("/v1/queues/jobs", `{"job":"resize"}`, "Idempotency-Key", "k1")
			var first queueAdded
			if resp.StatusCode != 201 || json.Unmarshal([]byte(body), &first) != nil || first.ID == "" || first.Length != 1 {
				t.Fatalf("first add: %d %s", resp.StatusCode, body)
			}
			if resp, body := post("/v1/queues/jobs", `{"job":"crop"}`, "Idempotency-Key", "k1"); resp.StatusCode != 422 {
				t.Fatalf("the key with another body: %d %s, want 422", resp.StatusCode, body)
			}
			resp, body = post("/v1/queues/jobs", `{"job":"resize"}`, "Idempotency-Key", "k1")
			var dup queueAdded
			if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &dup) != nil || dup.ID != first.ID || !dup.Duplicate {
				t.Fatalf("duplicate add: %d %s", resp.StatusCode, body)
			}
			if resp, body = post("/v1/queues/jobs", `{}`); resp.StatusCode != 201 {
				t.Fatalf("second add: %d %s", resp.StatusCode, body)
			}
			resp, body = post("/v1/queues/jobs", `{}`)
			if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(body, "length 2") {
				t.Fatalf("add to a full queue: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
			}
			for _, c := range []struct {
				path, body string
				status     int
			}{
				{"/v1/queues/other", `{}`, 404},
				{"/v1/queues/jobs", `[1]`, 400},
				{"/v1/queues/jobs", `{"n": 1}`, 400},
				{"/v1/queues/jobs", "{\"a\":\"\xff\"}", 400},
				{"/v1/queues/jobs", `{"a":"` + strings.Repeat("x", maxBodyBytes) + `"}`, 413},
				{"/v1/queues/jobs", `{"": ""}`, 400},
				{"/v1/queues/" + strings.Repeat("n", 5000), `{}`, 404},
			} {
				if resp, body := post(c.path, c.body); resp.StatusCode != c.status || len(body) > 1000 {
					t.Errorf("POST %.60s %.40q: %d %.300s (%d bytes), want %d", c.path, c.body, resp.StatusCode, body, len(body), c.status)
				}
			}
			if resp, err := http.Get(srv.URL + "/v1/queues/jobs"); err != nil || resp.StatusCode != 405 {
				t.Errorf("GET: %v %v", resp.StatusCode, err)
			}
			resp, err = http.Get(srv.URL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			m, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, want := range []string{`sluice_queue_length{queue="jobs"} 2`, `sluice_queue_capacity{queue="jobs"} 2`, `sluice_queue_admitted_total{queue="jobs"} 2`} {
				if !strings.Contains(string(m), want) {
					t.Errorf("metrics lack %s", want)
				}
			}
		})
	}
}

// TestQueueRetryAfterStoreFailure: entries posted while Redis is stopped
// (SIGSTOP) answer 503, and may still be queued when Redis continues. The
// answer carries the Idempotency-Key the server made, and a client that
// retries with it queues each entry exactly once: the queue then holds one
// entry per post, however many of the first tries landed. The store's
// timeout, 5s, is one a busy machine does not meet with Redis running (the
// 50ms default once was); the posts to the stopped Redis wait it out
// together.
func TestQueueRetryAfterStoreFailure(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rd := redistest.Start(t)
	cfg := Config{Store: rd.URL(), PolicyData: []byte("schema:\n  api: {limits: [1, 1, 1]}\n"), PolicyName: "t.yaml",
		Queues: map[string]QueueConfig{"jobs": {Capacity: 100}}, Timeout: 5 * time.Second}
	s, err := New(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	add := func(body, key string) (*http.Response, string) {
		if key == "" {
			return post(t, srv.URL+"/v1/queues/jobs", body)
		}
		return post(t, srv.URL+"/v1/queues/jobs", body, "Idempotency-Key", key)
	}
	resp, body := add(`{"n": "0"}`, "")
	var first queueAdded
	if resp.StatusCode != 201 || json.Unmarshal([]byte(body), &first) != nil || first.IdempotencyKey == "" || resp.Header.Get("Idempotency-Key") != first.IdempotencyKey {
		t.Fatalf("first post: %d %s", resp.StatusCode, body)
	}
	resume := rd.Pause(t)
	const n = 10
	keys := make([]string, n)
	statuses, bodies := make([]int, n), make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := http.Post(srv.URL+"/v1/queues/jobs", "application/json", strings.NewReader(fmt.Sprintf(`{"n": "%d"}`, i+1)))
			if err != nil {
				bodies[i] = err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			statuses[i], bodies[i], keys[i] = resp.StatusCode, string(b), resp.Header.Get("Idempotency-Key")
		})
	}
	wg.Wait()
	for i := range n {
		if statuses[i] != 503 || keys[i] == "" || !strings.Contains(bodies[i], "may have been queued") || !strings.Contains(bodies[i], keys[i]) {
			t.Fatalf("post %d with Redis stopped: %d %q %s", i, statuses[i], keys[i], bodies[i])
		}
	}
	resume()
	dups := 0
	for i := range n {
		// A retry of a 503 with its key: 200 if the first try landed, 201
		// if not; the store may still be reconnecting.
		for start := time.Now(); ; {
			resp, body := add(fmt.Sprintf(`{"n": "%d"}`, i+1), keys[i])
			if resp.StatusCode == 503 && time.Since(start) < time.Minute {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if resp.StatusCode != 200 && resp.StatusCode != 201 {
				t.Fatalf("retry %d: %d %s", i, resp.StatusCode, body)
			}
			if resp.StatusCode == 200 {
				dups++
			}
			break
		}
	}
	if got, err := rd.Do("XLEN", "sluice:{queue:jobs}"); err != nil || got != strconv.Itoa(n+1) {
		t.Fatalf("the stream holds %s entries (%v), want %d: one per post", got, err, n+1)
	}
	t.Logf("%d of %d first tries had landed", dups, n)

	// A worker handles and acks every entry; a retry after that (as a
	// client whose answer was lost would send) is still a duplicate, and
	// the work runs once.
	st, err := redis.Open(context.Background(), rd.URL(), redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	q, err := queue.Open(context.Background(), st, "jobs", queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var handled atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.Work(ctx, func(context.Context, queue.Entry) error {
			if handled.Add(1) == n+1 {
				stop()
			}
			return nil
		}, queue.WorkerOptions{})
	}()
	<-done
	for i := range n {
		resp, body := add(fmt.Sprintf(`{"n": "%d"}`, i+1), keys[i])
		var a queueAdded
		if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &a) != nil || !a.Duplicate {
			t.Errorf("retry %d after its entry was handled: %d %s, want 200 duplicate", i, resp.StatusCode, body)
		}
	}
	if got, err := rd.Do("XLEN", "sluice:{queue:jobs}"); err != nil || got != "0" {
		t.Errorf("the stream holds %s entries (%v) after the retries, want 0: nothing to run twice", got, err)
	}
}

// post sends body to url with the header pairs h, and returns the answer
// and its body.
func post(t *testing.T, url, body string, h ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// TestHungRedisAnswersEveryEndpoint: with Redis stopped (SIGSTOP) and a
// 50 ms timeout, queue posts (to a queue used before and to one never
// used, several at once) answer 503, and scrapes of /metrics and /readyz
// 200 (the stats last read; the store degraded), before and after the
// client dials Redis anew. A relay between them cuts the client's
// connections, so that it dials again; the new connection's handshake
// waits on the stopped Redis for the dial timeout, here an hour
// (dial_timeout, write_timeout), so an endpoint that waited on it would
// not answer for an hour where the 50 ms timeout must end it. (Once,
// posts waited 4-5 s on the default dial timeout.) The HTTP client's
// minute is a hang detector, not a bound on the 50 ms.
func TestHungRedisAnswersEveryEndpoint(t *testing.T) {
	rd := redistest.Start(t)
	rl := redistest.NewRelay(t, rd.Addr)
	cfg := Config{Store: "redis://" + rl.Addr + "/0?dial_timeout=1h&write_timeout=1h", Timeout: 50 * time.Millisecond,
		PolicyData: []byte("schema:\n  api: {limits: [1, 1, 1]}\n"), PolicyName: "t.yaml",
		Queues: map[string]QueueConfig{"jobs": {Capacity: 100}, "fresh": {Capacity: 100}}}
	s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.ready.Store(true) // as Serve sets it
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	// A post with Redis up; one a busy machine did not answer within the
	// 50ms is tried again (the minute is a hang detector).
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		resp, body := post(t, srv.URL+"/v1/queues/jobs", `{}`)
		if resp.StatusCode == 201 {
			break
		}
		if resp.StatusCode != 503 || time.Since(start) > time.Minute {
			t.Fatalf("a post with Redis up: %d %s", resp.StatusCode, body)
		}
	}
	defer rd.Pause(t)() // resumed before the servers close, so that a failure does not hang them
	client := &http.Client{Timeout: time.Minute}
	type answer struct {
		what   string
		status int
		err    error
	}
	ask := func(what, url, body string, answers chan<- answer) {
		method := "GET"
		if body != "" {
			method = "POST"
		}
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		resp, err := client.Do(req)
		status := 0
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
		}
		answers <- answer{what, status, err}
	}
	dialed := rl.Dialed()
	for round := range 24 {
		if round == 2 {
			rl.Cut() // the client dials anew, through the relay, to the stopped Redis
		}
		answers := make(chan answer, 16)
		n := 0
		for _, q := range []string{"jobs", "fresh"} {
			for range 3 {
				go ask("POST /v1/queues/"+q, srv.URL+"/v1/queues/"+q, `{}`, answers)
				n++
			}
		}
		go ask("GET /metrics", srv.URL+"/metrics", "", answers)
		go ask("GET /readyz", srv.URL+"/readyz", "", answers)
		for range n + 2 {
			a := <-answers
			want := 503
			if a.what != "POST /v1/queues/jobs" && a.what != "POST /v1/queues/fresh" {
				want = 200
			}
			if a.status != want {
				t.Fatalf("%s with Redis stopped (round %d): %d, %v; want %d", a.what, round, a.status, a.err, want)
			}
		}
	}
	if rl.Dialed() == dialed {
		t.Error("the client did not dial Redis anew after its connections were cut")
	}
}
