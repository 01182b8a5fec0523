package server

import "net/http"

// Handler is the HTTP API with every endpoint of docs/service.md (the
// admin ones given an admin token), for the tests: cmd/sluice serves it
// through Listen and Serve.
func (s *Server) Handler() http.Handler { return s.handler(true, true) }
