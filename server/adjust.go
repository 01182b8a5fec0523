package server

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/policy"
)

// changeRequest is the body of the admin changes: POST
// /admin/v1/penalty and /admin/v1/reward take units, /admin/v1/block
// takes for (a Go duration such as "30s"), /admin/v1/unblock nothing
// more. levels "all" changes the levels every caller shares too.
type changeRequest struct {
	Path   []string `json:"path"`
	Units  int64    `json:"units,omitempty"`
	For    string   `json:"for,omitempty"`
	Levels string   `json:"levels,omitempty"`
}

// ChangeJSON is the answer of an admin change: the keys changed and a
// peek of the path afterwards.
type ChangeJSON struct {
	Changed []string     `json:"changed"`
	State   DecisionJSON `json:"state"`
}

// handleChange serves the admin changes of a path's keys outside a
// request (policy.Checker.Change): 200 with the keys changed and the
// path's state after; 400 for a malformed body, a change no level of the
// path can take, units outside 1..2^53-1 or a block outside 1ms..365d;
// 503 when the store fails.
func (s *Server) handleChange(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, ok := s.readBodyOrRefuse(w, r, nil)
		if !ok {
			return
		}
		var req changeRequest
		err := decodeBody(body, &req)
		var ch policy.Change
		if err == nil {
			ch, err = req.change(kind)
		}
		if err == nil && (len(req.Path) == 0 || len(req.Path) > maxPathSegments) {
			err = fmt.Errorf(`"path" must have 1 to %d segments`, maxPathSegments)
		}
		if err == nil {
			err = validPath(req.Path)
		}
		if err != nil {
			writeProblem(w, http.StatusBadRequest, err.Error())
			return
		}
		ctx, cancel := s.storeCtx(r.Context())
		defer cancel()
		keys, err := s.checker.Change(ctx, time.Time{}, req.Path, ch)
		if err != nil {
			s.adminStoreError(w, err)
			return
		}
		b := new(batch)
		if _, err := s.decidePath(r.Context(), s.checker.Decide, req.Path, 0, b); err != nil {
			s.adminStoreError(w, err)
			return
		}
		s.log.Info("admin "+kind, "path", req.Path, "keys", keys)
		writeJSON(w, http.StatusOK, ChangeJSON{Changed: keys, State: NewDecisionJSON(&b.d)})
	}
}

// change is the policy.Change a body asks for.
func (req changeRequest) change(kind string) (policy.Change, error) {
	var ch policy.Change
	switch req.Levels {
	case "":
	case "all":
		ch.Shared = true
	default:
		return ch, errors.New(`"levels" must be "all" (change shared levels too) or left out`)
	}
	switch kind {
	case "penalty", "reward":
		if req.For != "" {
			return ch, fmt.Errorf(`a %s takes "units", not "for"`, kind)
		}
		if req.Units < 1 || req.Units > algo.MaxCount {
			return ch, fmt.Errorf(`"units" must be 1 to %d, got %d`, algo.MaxCount, req.Units)
		}
		ch.Op, ch.Units = algo.Penalize, req.Units
		if kind == "reward" {
			ch.Op = algo.Reward
		}
	case "block":
		d, err := time.ParseDuration(req.For)
		if err != nil || req.Units != 0 {
			return ch, errors.New(`a block takes "for", a duration such as "30s"`)
		}
		if d < algo.MinBlock || d > algo.MaxBlock {
			return ch, fmt.Errorf(`"for" must be %v to %v, got %v`, algo.MinBlock, algo.MaxBlock, d)
		}
		ch.Block = d
	case "unblock":
		if req.Units != 0 || req.For != "" {
			return ch, errors.New(`an unblock takes only "path" (and "levels")`)
		}
		ch.Unblock = true
	}
	return ch, nil
}
