package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/answer"
	"github.com/sluicehq/sluice/store"
)

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

// writeProblem answers status with an about:blank problem details body.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	answer.WriteProblem(w, status, detail, nil)
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
