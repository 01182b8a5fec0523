package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/answer"
	"github.com/sluicehq/sluice/internal/jsonenc"
	"github.com/sluicehq/sluice/store"
)

// Handler returns the HTTP API, every endpoint of docs/service.md. The
// admin endpoints exist only with an admin token configured.
func (s *Server) Handler() http.Handler { return s.handler(true, true) }

// handler is the HTTP API with or without the admin endpoints, and with or
// without the check endpoint (an admin listener of its own has none).
func (s *Server) handler(admin, check bool) http.Handler {
	mux := http.NewServeMux()
	if check {
		mux.HandleFunc("POST /v1/check", s.handleCheck)
		mux.HandleFunc("/v1/check", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", "POST")
			writeProblem(w, http.StatusMethodNotAllowed, "use POST with a JSON body such as {\"path\": [\"user\", \"alex\"]}")
		})
	}
	if check {
		mux.HandleFunc("POST /v1/acquire", s.handleAcquire)
		mux.HandleFunc("/v1/acquire", methodNotAllowed("POST"))
		mux.HandleFunc("POST /v1/renew", s.handleSlot(algo.Renew))
		mux.HandleFunc("POST /v1/release", s.handleSlot(algo.Release))
		mux.HandleFunc("/v1/renew", methodNotAllowed("POST"))
		mux.HandleFunc("/v1/release", methodNotAllowed("POST"))
		mux.HandleFunc("POST /v1/settle", s.handleSettle)
		mux.HandleFunc("/v1/settle", methodNotAllowed("POST"))
		mux.HandleFunc("/v1/forward-auth", s.handleForwardAuth(false))
		mux.HandleFunc("/v1/forward-auth/nginx", s.handleForwardAuth(true))
		mux.HandleFunc("POST /v1/queues/{name}", s.handleQueueAdd)
		mux.HandleFunc("/v1/queues/{name}", methodNotAllowed("POST"))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", s.handleReady)
	mux.HandleFunc("GET /healthcheck", s.handleReady) // envoyproxy/ratelimit's path, which Envoy Gateway probes
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}))
	if admin {
		mux.HandleFunc("GET /admin/v1/state", s.admin(s.handleState))
		mux.HandleFunc("DELETE /admin/v1/state", s.admin(s.handleReset))
		mux.HandleFunc("/admin/v1/state", s.admin(methodNotAllowed("GET, DELETE")))
		mux.HandleFunc("GET /admin/v1/consumers", s.admin(s.handleConsumers))
		mux.HandleFunc("/admin/v1/consumers", s.admin(methodNotAllowed("GET")))
		mux.HandleFunc("GET /admin/v1/holders", s.admin(s.handleHolders))
		mux.HandleFunc("/admin/v1/overrides", s.admin(s.handleOverrides))
		for _, kind := range []string{"penalty", "reward", "block", "unblock"} {
			mux.HandleFunc("POST /admin/v1/"+kind, s.admin(s.handleChange(kind)))
			mux.HandleFunc("/admin/v1/"+kind, s.admin(methodNotAllowed("POST")))
		}
		mux.HandleFunc("/admin/v1/holders", s.admin(methodNotAllowed("GET")))
	}
	mux.HandleFunc("/", notFound)
	return mux
}

func notFound(w http.ResponseWriter, r *http.Request) {
	writeProblem(w, http.StatusNotFound, "no such endpoint: try POST /v1/check")
}

// methodNotAllowed answers 405 with the methods allowed.
func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeProblem(w, http.StatusMethodNotAllowed, "use "+allow)
	}
}

// handleCheck serves POST /v1/check: 200 with the decision when allowed,
// 429 when limited, with the RateLimit fields (and Retry-After when
// denied, unless the cost can never be admitted); 400 with a problem+json
// body for a malformed request. When the store fails, the answer is the
// on_store_error policy's, with store_error set in the body and no
// RateLimit fields.
func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request) {
	s.inflight.Add(1)
	defer s.inflight.Done()
	c := answer.Get("http")
	defer c.Put()
	meta, ok := s.readCheck(w, r, c)
	if !ok {
		return
	}
	s.pipe.Answer(r.Context(), c)
	s.observe(c)
	switch {
	case c.Gone:
		return
	case c.Status == http.StatusBadRequest:
		writeProblem(w, c.Status, c.Err.Error())
		return
	case len(meta) > 0 && c.Decision.Allowed && !c.Failed:
		for i := range c.Query.Paths {
			if pq := &c.Query.Paths[i]; pq.Cost > 0 {
				s.consumers.record(pq.Match.Hits, pq.Cost, meta)
			}
		}
	}
	s.writeCheck(w, c)
}

// readCheck decodes a check's body into c: its query, and what it does
// beside deciding; and returns its meta. A body that cannot be read or is
// bad is refused here (ok false).
func (s *Server) readCheck(w http.ResponseWriter, r *http.Request, c *answer.Call) (meta json.RawMessage, ok bool) {
	body, ok := s.readBodyOrRefuse(w, r, c.Body[:0])
	c.Body = body[:0]
	if !ok {
		return nil, false
	}
	var req checkRequest
	cost := int64(1)
	path, n, hasCost, fast := parseCheckFast(body, c.Path[:0])
	c.Path = path[:0]
	if fast {
		req.Path = path
		if hasCost {
			cost = n
		}
	} else {
		var err error
		if req, err = parseCheckRequest(body); err != nil {
			s.badRequest(w, err)
			return nil, false
		}
		if req.Cost != nil {
			cost = *req.Cost
		}
	}
	pqs := c.SetPaths(max(len(req.Paths), 1))
	for i := range pqs {
		pqs[i].Path, pqs[i].Cost, pqs[i].Limit = req.Path, cost, req.limit
		if req.Paths != nil {
			pqs[i].Path = req.Paths[i]
		}
		if req.Costs != nil {
			pqs[i].Cost = req.Costs[i]
		}
		// A check that takes slots takes them under a new permit id,
		// which the answer gives for /v1/renew and /v1/release.
		c.Slots = c.Slots || pqs[i].Cost > 0
	}
	c.Within = req.within
	return req.Meta, true
}

// writeCheck answers a check: its status, the header fields and the
// decision's JSON.
func (s *Server) writeCheck(w http.ResponseWriter, c *answer.Call) {
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	c.SetHeader(h, s.cfg.Headers != "legacy", s.cfg.Headers != "draft")
	storeErr := ""
	if c.Failed {
		storeErr = "store unavailable: " + c.Err.Error()
	}
	out := appendDecisionJSON(c.Buf[:0], &c.Decision, storeErr)
	if c.SettleID != "" {
		out = append(out[:len(out)-1], `,"settle_id":`...)
		out = append(jsonenc.AppendString(out, c.SettleID), '}')
	}
	out = append(out, '\n')
	c.Buf = out[:0]
	if len(out) > 2048 { // past what net/http measures by itself
		h["Content-Length"] = []string{strconv.Itoa(len(out))}
	}
	w.WriteHeader(c.Status)
	w.Write(out)
}

// contentTypeJSON is shared by every answer: net/http only reads it.
var contentTypeJSON = []string{"application/json"}

// errTooLarge is readBody's error for a body over maxBodyBytes: a 413.
var errTooLarge = errors.New("the body is too large")

// readBodyOrRefuse reads the body into buf (readBody), or answers 413 for
// one over maxBodyBytes and 400 for one that cannot be read, counts the
// bad request and reports false.
func (s *Server) readBodyOrRefuse(w http.ResponseWriter, r *http.Request, buf []byte) ([]byte, bool) {
	body, err := readBody(r, buf)
	if err != nil {
		s.m.badRequests.WithLabelValues("http").Inc()
		status := http.StatusBadRequest
		if errors.Is(err, errTooLarge) {
			status = http.StatusRequestEntityTooLarge
		}
		writeProblem(w, status, err.Error())
		return body, false
	}
	return body, true
}

// readBody reads at most maxBodyBytes of the body into buf.
func readBody(r *http.Request, buf []byte) ([]byte, error) {
	if r.ContentLength > maxBodyBytes {
		return buf, fmt.Errorf("%w: %d bytes, more than %d", errTooLarge, r.ContentLength, maxBodyBytes)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		room := buf[len(buf):min(cap(buf), maxBodyBytes+1)]
		if len(room) == 0 {
			break
		}
		n, err := r.Body.Read(room)
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return buf, bodyErrorf("reading the body: %v", err)
		}
	}
	if len(buf) > maxBodyBytes {
		return buf, fmt.Errorf("%w: more than %d bytes", errTooLarge, maxBodyBytes)
	}
	return buf, nil
}

// writeProblem answers status with an about:blank problem details body.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	answer.WriteProblem(w, status, "", "", detail, nil)
}

// writeJSON answers status with v as JSON on one line, the style of every
// answer (/v1/check's too).
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// PingStore asks the store whether it answers; a store that cannot tell
// (the memory store) always does.
func (s *Server) PingStore(ctx context.Context) error {
	if p, ok := s.store.(store.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// handleReady serves GET /readyz: 503 with the reason while the server has
// no policy loaded or is shutting down, else 200. A store that does not
// answer a ping within the timeout does not make it 503: the service still
// answers every request, by on_store_error, and a Redis blip must not take
// every replica out of its Service at once. The body then says the store
// is degraded and what the service answers meanwhile (as does
// sluice_store_up, and a log line when the store's state changes).
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !s.ready.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "shutting down\n")
		return
	}
	if s.current.Load() == nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "no policy loaded\n")
		return
	}
	if why := s.xdsWait.Load(); why != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "no rate limit configuration loaded: "+*why+"\n")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
	defer cancel()
	if err := s.PingStore(ctx); err != nil {
		s.noteStore(err)
		io.WriteString(w, "ready; store degraded: "+err.Error()+"; meanwhile "+s.storeErrorAnswer()+"\n")
		return
	}
	s.noteStore(nil)
	io.WriteString(w, "ready\n")
}

// storeErrorAnswer says what the service answers while its store fails.
func (s *Server) storeErrorAnswer() string {
	if s.failOpen {
		return "every check is allowed (on_store_error: allow)"
	}
	return "every check is denied with 503 (on_store_error: deny)"
}

// noteStore logs when a ping finds the store's state changed: degraded
// (err) or back.
func (s *Server) noteStore(err error) {
	if s.storeDown.Swap(err != nil) == (err != nil) {
		return
	}
	if err != nil {
		s.log.Warn("store degraded: the service stays ready and answers by on_store_error", "err", err, "on_store_error", s.cfg.OnStoreError)
	} else {
		s.log.Info("store answers again")
	}
}

// --- admin ---
