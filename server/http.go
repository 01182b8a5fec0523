package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/headers"
	"github.com/sluicehq/sluice/internal/jsonenc"
	"github.com/sluicehq/sluice/internal/problem"
	"github.com/sluicehq/sluice/policy"
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
	s.envoyRoutes(mux, check)                         // envoyproxy/ratelimit's POST /json and GET /rlconfig (envoyhttp.go)
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
	b := batchPool.Get().(*batch)
	defer batchPool.Put(b)

	body, ok := s.readBodyOrRefuse(w, r, b.body[:0])
	b.body = body[:0]
	if !ok {
		return
	}
	var req checkRequest
	path, cost, hasCost, fast := parseCheckFast(body, b.path[:0])
	b.path = path[:0]
	if fast {
		req.Path = path
		if !hasCost {
			cost = 1
		}
	} else {
		var err error
		if req, err = parseCheckRequest(body); err != nil {
			s.m.badRequests.WithLabelValues("http").Inc()
			writeProblem(w, http.StatusBadRequest, err.Error())
			return
		}
		cost = 1
		if req.Cost != nil {
			cost = *req.Cost
		}
	}
	if r.Context().Err() != nil {
		return // the client has gone: decide nothing it would not hear of
	}
	start := time.Now()
	// A check that takes slots takes them under a new permit id, which
	// the answer gives for /v1/renew and /v1/release.
	op := policy.Check
	if cost > 0 || slices.ContainsFunc(req.Costs, func(c int64) bool { return c > 0 }) {
		op = policy.Acquire
	}
	if req.within > 0 {
		op = policy.Estimate
	}
	var err error
	switch {
	case req.Paths == nil && req.limit == nil && op != policy.Estimate:
		_, err = s.decidePath(r.Context(), op, 0, req.Path, cost, b)
	default:
		paths := req.Paths
		if paths == nil {
			paths = [][]string{req.Path}
		}
		q := b.query(len(paths))
		for i := range q.Paths {
			q.Paths[i].Path, q.Paths[i].Cost, q.Paths[i].Limit = paths[i], cost, req.limit
			if req.Costs != nil {
				q.Paths[i].Cost = req.Costs[i]
			}
		}
		q.Op, q.Within = op, req.within
		err = s.decideQuery(r.Context(), q, b)
	}
	pqs := b.q.Paths
	s.m.httpDuration.Observe(time.Since(start).Seconds())
	if err == nil {
		s.noteUnmatched(&b.q)
	}
	storeErr := ""
	if err != nil {
		if isBadRequest(err) {
			s.m.badRequests.WithLabelValues("http").Inc()
			writeProblem(w, http.StatusBadRequest, err.Error())
			return
		}
		if r.Context().Err() != nil {
			return // the client has gone
		}
		s.storeFailed("http", err)
		storeErr = "store unavailable: " + err.Error()
		matched := true
		for i := range pqs {
			matched = matched && !pqs[i].Match.Unmatched
		}
		b.d = policy.Decision{Levels: b.d.Levels[:0], Matched: matched, Allowed: s.failOpen}
		b.d.Summary.Allowed = s.failOpen
		if s.failOpen {
			s.m.httpChecks.errAllowed.Inc()
		} else {
			b.d.Summary.RetryAfter = time.Second
			s.m.httpChecks.errDenied.Inc()
		}
	} else {
		s.countLevels(b.d.Levels)
		if b.d.Permit != 0 {
			s.countSlots("http", algo.Acquire, &b.d)
		}
		s.m.httpChecks.count(&b.d)
		if len(req.Meta) > 0 && b.d.Allowed {
			for i := range pqs {
				if c := pqs[i].Cost; c > 0 {
					s.consumers.record(pqs[i].Match.Hits, c, req.Meta)
				}
			}
		}
	}

	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	status := s.addDecisionHeaders(h, b, storeErr != "")
	out := appendDecisionJSON(b.buf[:0], &b.d, storeErr)
	if b.d.Ticket != "" {
		out = append(out[:len(out)-1], `,"settle_id":`...)
		out = append(jsonenc.AppendString(out, b.d.Ticket), '}')
	}
	out = append(out, '\n')
	b.buf = out[:0]
	if len(out) > 2048 { // past what net/http measures by itself
		h["Content-Length"] = []string{strconv.Itoa(len(out))}
	}
	w.WriteHeader(status)
	w.Write(out)
	b.hdr = [3]string{}
}

// addDecisionHeaders sets the RateLimit fields of the decision in b (none
// when the store failed), and Retry-After when it denies, and returns the
// answer's status. Header values live in b.hdr: WriteHeader copies them
// before the batch goes back to the pool, and the caller empties b.hdr
// then.
func (s *Server) addDecisionHeaders(h http.Header, b *batch, storeFailed bool) int {
	if !storeFailed && s.cfg.Headers != "legacy" {
		fields, end := headers.AppendDraftFields(b.buf[:0], b.d.Levels)
		b.buf = fields[:0]
		if end > 0 {
			both := string(fields) // one allocation for both values
			b.hdr[0], b.hdr[1] = both[:end], both[end:]
			h[hdrPolicy] = b.hdr[0:1:1]
			h[hdrRateLimit] = b.hdr[1:2:2]
		}
	}
	if !storeFailed && s.cfg.Headers != "draft" && len(b.d.Levels) > 0 {
		// The older X-RateLimit-* fields, as the middleware's
		// LegacyHeaders writes them: the summary's limit, remaining, and
		// seconds until it is full (until Retry-After when denied).
		sum := b.d.Summary
		reset := headers.CeilSeconds(sum.ResetAfter)
		if !b.d.Allowed && sum.RetryAfter > 0 {
			reset = headers.RetrySeconds(sum.RetryAfter)
		}
		h["X-Ratelimit-Limit"] = []string{strconv.FormatInt(sum.Quota, 10)}
		h["X-Ratelimit-Remaining"] = []string{strconv.FormatInt(max(sum.Remaining, 0), 10)}
		h["X-Ratelimit-Reset"] = []string{strconv.FormatInt(reset, 10)}
	}
	status := answerStatus(&b.d, storeFailed)
	if status != http.StatusOK && status != http.StatusForbidden {
		if secs, ok := headers.RetryAfterSeconds(b.d.Summary); ok {
			b.hdr[2] = strconv.FormatInt(secs, 10)
			h["Retry-After"] = b.hdr[2:3:3]
		}
	}
	return status
}

// Canonical header names, so that the hot path assigns map entries
// without canonicalizing.
const (
	hdrPolicy    = "Ratelimit-Policy"
	hdrRateLimit = "Ratelimit"
)

// answerStatus is the HTTP status of a check: problem.Status, or 503
// when the store failed and on_store_error is deny (Retry-After: 1).
func answerStatus(d *policy.Decision, storeFailed bool) int {
	if !d.Allowed && storeFailed {
		return http.StatusServiceUnavailable
	}
	return problem.Status(d)
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
	problem.Write(w, status, "", "", detail, nil)
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
