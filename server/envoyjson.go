package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

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
