package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/policy"
)

// envoyRoutes adds envoyproxy/ratelimit's HTTP endpoints to the HTTP
// API's mux (check: the listener that decides, its PORT) or to the admin
// listener's (its DEBUG_PORT): POST /json, and GET /rlconfig.
func (s *Server) envoyRoutes(mux *http.ServeMux, check bool) {
	if check {
		mux.HandleFunc("/json", s.handleEnvoyJSON) // any method, as there
	} else {
		mux.HandleFunc("GET /rlconfig", s.handleRLConfig)
	}
}

// rlconfig is the text of /rlconfig for the policy p, converted from
// envoyproxy/ratelimit's configuration (a directory, or xDS), and the
// patterns of p's nodes that were its unlimited descriptors
// (envoyimport.Dump): ShouldRateLimit answers them, and no other path, as
// unlimited; and those in quota mode of their own, which its dynamic
// metadata names.
type rlconfig struct {
	p         *policy.Policy
	text      string
	unlimited map[string]bool
	quota     map[string]bool // the nodes of descriptors in quota mode of their own (envoyimport.Dump)
}

// handleRLConfig serves GET /rlconfig as envoyproxy/ratelimit serves it on
// its debug port: the configuration in force, a line per descriptor with
// a rate_limit (envoyimport.Dump); empty when the policy is not one
// converted from Envoy's configuration.
func (s *Server) handleRLConfig(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if c := s.rlconfig.Load(); c != nil && c.p == s.current.Load() {
		io.WriteString(w, c.text)
	}
}

// handleEnvoyJSON serves POST /json as envoyproxy/ratelimit serves it on
// its PORT: Envoy's RateLimitRequest in protobuf's JSON mapping, decided
// as ShouldRateLimit decides it over gRPC, its RateLimitResponse in the
// same mapping; 429 when the overall code is OVER_LIMIT, else 200. A body
// that is not such a request, or a request ShouldRateLimit refuses, is
// 400 (envoyproxy/ratelimit's answer to both; the text says why); a body
// over maxBodyBytes is 413 before it is read further.
func (s *Server) handleEnvoyJSON(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		s.m.badRequests.WithLabelValues("http").Inc()
		if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
			http.Error(w, fmt.Sprintf("the body is larger than %d bytes", maxBodyBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "Bad Request: reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var req rlv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		s.m.badRequests.WithLabelValues("http").Inc()
		http.Error(w, "Bad Request: not a RateLimitRequest in JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := (&rateLimitService{s: s}).ShouldRateLimit(r.Context(), &req)
	if err != nil {
		http.Error(w, "Bad Request: "+status.Convert(err).Message(), http.StatusBadRequest)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == rlv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}
