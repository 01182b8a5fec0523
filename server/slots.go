package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/answer"
	"github.com/sluicehq/sluice/policy"
)

// slotRequest is the body of POST /v1/renew and POST /v1/release: the
// path a check acquired slots on, and the permit id its answer gave.
type slotRequest struct {
	Path   []string `json:"path"`
	Permit string   `json:"permit"`
}

// parseSlotRequest decodes and validates a renew or release body: one
// JSON object with no unknown fields, a path as a check's, and a permit id
// in decimal, 1 to algo.MaxPermitID.
func parseSlotRequest(body []byte) (path []string, permit int64, err error) {
	var req slotRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, 0, err
	}
	switch {
	case len(req.Path) == 0:
		return nil, 0, bodyErrorf(`"path" is missing or empty: give the path the check acquired slots on`)
	case len(req.Path) > maxPathSegments:
		return nil, 0, bodyErrorf(`"path" has %d segments, more than %d`, len(req.Path), maxPathSegments)
	}
	if err := validPath(req.Path); err != nil {
		return nil, 0, err
	}
	id, perr := strconv.ParseInt(req.Permit, 10, 64)
	if perr != nil || id < 1 || id > algo.MaxPermitID || strconv.FormatInt(id, 10) != req.Permit {
		return nil, 0, bodyErrorf(`"permit" must be the decimal id a check answered (1 to %d), got %q`, int64(algo.MaxPermitID), firstBytes([]byte(req.Permit), 40))
	}
	return req.Path, id, nil
}

// handleSlot serves POST /v1/renew and POST /v1/release for a permit a
// check acquired. Both decide the path's concurrency levels alone, with
// the RateLimit fields of those levels.
//
// Renew: 200 with the decision when every concurrency level still held
// the permit, and its hold runs hold_for from now on each; 404 when a
// level no longer holds it (released, its hold ended, or an id never
// acquired or forged): the holder has lost its slots and renews nothing.
//
// Release: 200 with the decision and "released": true when the permit's
// slots are now free, false when it held none (released before, hold
// ended, never acquired): a release is idempotent.
//
// Both: 400 for a malformed body or a path with no concurrency limit,
// 503 when the store fails.
func (s *Server) handleSlot(op algo.SlotOp) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.inflight.Add(1)
		defer s.inflight.Done()
		body, ok := s.readBodyOrRefuse(w, r, nil)
		if !ok {
			return
		}
		path, permit, err := parseSlotRequest(body)
		if err != nil {
			s.badRequest(w, err)
			return
		}
		c := answer.Get("http")
		defer c.Put()
		c.Query.Paths = append(c.Query.Paths, policy.PathQuery{Path: path})
		c.Query.Op, c.Query.Permit = slotOp(op), permit
		if !s.answerSlots(w, r, c) {
			return
		}
		if !hasSlotLevel(&c.Decision) {
			s.badRequest(w, errors.New("the path has no concurrency limit: nothing holds slots there"))
			return
		}
		s.countSlots("http", op, &c.Decision)
		out := AppendDecisionJSON(nil, &c.Decision)
		if op == algo.Release {
			out = append(out[:len(out)-1], `,"released":`...)
			out = append(strconv.AppendBool(out, slotUnits(&c.Decision) > 0), '}')
		}
		c.SetHeader(w.Header(), s.cfg.Headers != "legacy", s.cfg.Headers != "draft")
		if op == algo.Renew && !c.Decision.Allowed {
			writeProblem(w, http.StatusNotFound, "permit "+strconv.FormatInt(permit, 10)+" holds no slot on this path: it was released, its hold ended, or it was never acquired; acquire anew with POST /v1/check")
			return
		}
		writeJSON(w, c.Status, json.RawMessage(out))
	}
}

// badRequest answers 400 for a request that is the caller's
// fault, and counts it.
func (s *Server) badRequest(w http.ResponseWriter, err error) {
	s.m.badRequests.WithLabelValues("http").Inc()
	writeProblem(w, http.StatusBadRequest, err.Error())
}

// answerSlots answers a slot call, or refuses it when its decision
// failed (false): 400 when the request was bad, else 503 with
// Retry-After (the store failed).
func (s *Server) answerSlots(w http.ResponseWriter, r *http.Request, c *answer.Call) bool {
	s.pipe.Answer(r.Context(), c)
	switch {
	case c.Gone:
		return false
	case c.Status == http.StatusBadRequest:
		s.badRequest(w, c.Err)
		return false
	case c.Failed:
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "store unavailable: "+c.Err.Error())
		return false
	}
	return true
}

// handleAcquire serves POST /v1/acquire: a check (the body of POST
// /v1/check) of a path that must hit a concurrency limit, whose answer
// holds the slots under "permit" for /v1/renew and /v1/release. It
// answers as a check does (200, or 429 with Retry-After when no slot is
// free or a rate level denies), and 400 for a path with no concurrency
// limit, where a check would take no slot.
func (s *Server) handleAcquire(w http.ResponseWriter, r *http.Request) {
	s.inflight.Add(1)
	defer s.inflight.Done()
	body, ok := s.readBodyOrRefuse(w, r, nil)
	if !ok {
		return
	}
	req, err := parseCheckRequest(body, nil)
	switch {
	case err != nil:
	case req.Cost < 1:
		err = bodyErrorf(`"cost" of an acquire must be at least 1 slot, got %d`, req.Cost)
	case req.Paths != nil || req.Limit != nil:
		err = bodyErrorf(`an acquire takes one "path", and no "paths" or "limit"`)
	}
	if err != nil {
		s.badRequest(w, err)
		return
	}
	if !s.mayHoldSlots(req.Path) {
		s.badRequest(w, errors.New("the path has no concurrency limit: an acquire would hold no slot (use POST /v1/check)"))
		return
	}
	c := answer.Get("http")
	defer c.Put()
	c.Query.Paths = append(c.Query.Paths, policy.PathQuery{Path: req.Path, Cost: req.Cost})
	c.Query.Op = policy.Acquire
	if !s.answerSlots(w, r, c) {
		return
	}
	if !hasSlotLevel(&c.Decision) { // the policy was reloaded between
		s.badRequest(w, errors.New("the path has no concurrency limit: an acquire would hold no slot (use POST /v1/check)"))
		return
	}
	s.countLevels(c.Decision.Levels)
	s.countSlots("http", algo.Acquire, &c.Decision)
	c.SetHeader(w.Header(), s.cfg.Headers != "legacy", s.cfg.Headers != "draft")
	writeJSON(w, c.Status, json.RawMessage(AppendDecisionJSON(nil, &c.Decision)))
}

// mayHoldSlots reports whether path hits a concurrency limit, or a list
// (which decides it counting nothing), so that an acquire that could hold
// no slot is refused before anything is decided.
func (s *Server) mayHoldSlots(path []string) bool {
	m := s.current.Load().Match(path)
	if m.Listed.List != "" {
		return true
	}
	for _, h := range m.Hits {
		for _, l := range h.Limits {
			if l.Kind() == algo.KindConcurrency {
				return true
			}
		}
	}
	return false
}

// slotOp is the policy's Op of a slot verb.
func slotOp(op algo.SlotOp) policy.Op {
	if op == algo.Renew {
		return policy.Renew
	}
	return policy.Release
}
