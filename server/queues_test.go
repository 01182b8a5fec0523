package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestQueueEndpoint: POST /v1/queues/{name} on Redis: 201 with an
// id until the capacity, then 429 with Retry-After; an Idempotency-Key
// still queued answers 200 with its entry; unknown queues 404; bad
// bodies 400 and 413; the queue's gauges in /metrics.
func TestQueueEndpoint(t *testing.T) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := Config{Store: "memory", PolicyData: []byte("schema:\n  api: {limits: [1, 1, 1]}\n"), PolicyName: "t.yaml",
		Queues: map[string]QueueConfig{"jobs": {Capacity: 2}}}
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
				req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
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
			resp, body := post("/v1/queues/jobs", `{"job":"resize"}`, "Idempotency-Key", "k1")
			var first QueueAdded
			if resp.StatusCode != 201 || json.Unmarshal([]byte(body), &first) != nil || first.ID == "" || first.Length != 1 {
				t.Fatalf("first add: %d %s", resp.StatusCode, body)
			}
			resp, body = post("/v1/queues/jobs", `{"job":"resize"}`, "Idempotency-Key", "k1")
			var dup QueueAdded
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
				{"/v1/queues/jobs", `{"a":"` + strings.Repeat("x", MaxBodyBytes) + `"}`, 413},
			} {
				if resp, body := post(c.path, c.body); resp.StatusCode != c.status {
					t.Errorf("POST %s %.40q: %d %s, want %d", c.path, c.body, resp.StatusCode, body, c.status)
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
