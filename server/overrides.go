package server

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/policy"
)

// overridePoll is how often the service reads the store's overrides
// (policy.Checker.Refresh): an override set on one instance applies on
// every other within it and a round trip.
const overridePoll = 250 * time.Millisecond

// overrideRequest is the body of POST /admin/v1/overrides: the path whose
// node and key to override (a last segment with * is a glob of keys), the
// limits or factor, and for how long.
type overrideRequest struct {
	Path   []string    `json:"path"`
	Limits []algo.Spec `json:"limits"`
	Factor float64     `json:"factor"`
	For    string      `json:"for"`
	Until  time.Time   `json:"until"`
}

// handleOverrides serves /admin/v1/overrides: GET lists the overrides,
// POST sets one (200 with it; 400 for one the policy refuses), DELETE
// removes the one of ?path=...&path=... .
func (s *Server) handleOverrides(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	switch r.Method {
	case http.MethodGet:
		list, err := s.checker.Overrides(ctx)
		if err != nil {
			s.adminStoreError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"overrides": append([]policy.Override{}, list...)})
	case http.MethodPost:
		body, ok := s.readBodyOrRefuse(w, r, nil)
		if !ok {
			return
		}
		var req overrideRequest
		if err := decodeBody(body, &req); err != nil {
			writeProblem(w, http.StatusBadRequest, err.Error())
			return
		}
		o, err := s.override(req.Path)
		if err == nil && req.For != "" {
			var d time.Duration
			switch d, err = yamlfile.ParseDuration(req.For); {
			case err != nil:
			case d <= 0:
				err = fmt.Errorf(`"for" must be positive (leave it out: until removed), got %s`, req.For)
			case !req.Until.IsZero():
				err = errors.New(`give "for" or "until", not both`)
			}
			req.Until = time.Now().Add(d)
		}
		if err != nil {
			writeProblem(w, http.StatusBadRequest, err.Error())
			return
		}
		o.Limits, o.Factor, o.Until = req.Limits, req.Factor, req.Until
		if err := s.checker.SetOverride(ctx, o); err != nil {
			s.adminStoreError(w, err)
			return
		}
		s.log.Info("admin override", "node", o.Node, "key", o.Key, "factor", o.Factor, "until", o.Until)
		writeJSON(w, http.StatusOK, map[string]any{"override": o})
	case http.MethodDelete:
		o, err := s.override(r.URL.Query()["path"])
		if err != nil {
			writeProblem(w, http.StatusBadRequest, err.Error())
			return
		}
		if err := s.checker.RemoveOverride(ctx, o.Node, o.Key); err != nil {
			s.adminStoreError(w, err)
			return
		}
		s.log.Info("admin override removed", "node", o.Node, "key", o.Key)
		writeJSON(w, http.StatusOK, map[string]any{"removed": o})
	default:
		methodNotAllowed("GET, POST, DELETE")(w, r)
	}
}

// override is the Override of a path's node and key.
func (s *Server) override(path []string) (policy.Override, error) {
	if len(path) == 0 || len(path) > maxPathSegments {
		return policy.Override{}, errors.New(`"path" must have 1 to 64 segments`)
	}
	node, key, err := s.current.Load().Target(path)
	return policy.Override{Node: node, Key: key}, err
}
