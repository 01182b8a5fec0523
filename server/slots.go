package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// SlotRequest is the body of POST /v1/renew and POST /v1/release: the
// path a check acquired slots on, and the permit id its answer gave.
type SlotRequest struct {
	Path   []string `json:"path"`
	Permit string   `json:"permit"`
}

// ParseSlotRequest decodes and validates a renew or release body: one
// JSON object with no unknown fields, a path as a check's, and a permit id
// in decimal, 1 to algo.MaxPermitID.
func ParseSlotRequest(body []byte) (path []string, permit int64, err error) {
	var req SlotRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, 0, describeJSONError(body, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, 0, bodyErrorf("malformed JSON: more than one value in the body")
	}
	switch {
	case len(req.Path) == 0:
		return nil, 0, bodyErrorf(`"path" is missing or empty: give the path the check acquired slots on`)
	case len(req.Path) > MaxPathSegments:
		return nil, 0, bodyErrorf(`"path" has %d segments, more than %d`, len(req.Path), MaxPathSegments)
	}
	if err := ValidPath(req.Path); err != nil {
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
// the permit, and its lease runs hold_for from now on each; 404 when a
// level no longer holds it (released, its lease ended, or an id never
// acquired or forged): the holder has lost its slots and renews nothing.
//
// Release: 200 with the decision and "released": true when the permit's
// slots are now free, false when it held none (released before, lease
// ended, never acquired): a release is idempotent.
//
// Both: 400 for a malformed body or a path with no concurrency limit,
// 503 when the store fails.
func (s *Server) handleSlot(op algo.SlotOp) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.inflight.Add(1)
		defer s.inflight.Done()
		body, err := readBody(r, nil)
		if err != nil {
			s.m.badRequests.WithLabelValues("http").Inc()
			status := http.StatusBadRequest
			if errors.Is(err, errTooLarge) {
				status = http.StatusRequestEntityTooLarge
			}
			writeProblem(w, status, err.Error())
			return
		}
		path, permit, err := ParseSlotRequest(body)
		if err != nil {
			s.m.badRequests.WithLabelValues("http").Inc()
			writeProblem(w, http.StatusBadRequest, err.Error())
			return
		}
		b := new(batch)
		if _, err := s.decideSlots(r.Context(), path, 0, permit, op, false, b); err != nil {
			if isBadRequest(err) {
				s.m.badRequests.WithLabelValues("http").Inc()
				writeProblem(w, http.StatusBadRequest, err.Error())
				return
			}
			s.storeFailed("http", err)
			w.Header().Set("Retry-After", "1")
			writeProblem(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
			return
		}
		if len(b.d.Levels) == 0 {
			s.m.badRequests.WithLabelValues("http").Inc()
			writeProblem(w, http.StatusBadRequest, "the path has no concurrency limit: nothing holds slots there")
			return
		}
		s.countSlots("http", op, &b.d)
		out := NewDecisionJSON(&b.d)
		if op == algo.Release {
			freed := slotUnits(&b.d) > 0
			out.Released = &freed
		}
		status := addDecisionHeaders(w.Header(), b, false)
		if op == algo.Renew && !b.d.Allowed {
			writeProblem(w, http.StatusNotFound, "permit "+strconv.FormatInt(permit, 10)+" holds no slot on this path: it was released, its lease ended, or it was never acquired; acquire anew with POST /v1/check")
			return
		}
		writeJSON(w, status, out)
	}
}

// slotUnits returns the most units a decision's concurrency levels
// admitted (an acquire) or freed (a release).
func slotUnits(d *sluice.Decision) int64 {
	var n int64
	for i := range d.Levels {
		if l := &d.Levels[i]; l.Limit != nil && l.Limit.Kind() == algo.KindConcurrency {
			n = max(n, l.Result.Admitted)
		}
	}
	return n
}

// countSlots counts a decision's slot units in the metrics.
func (s *Server) countSlots(api string, op algo.SlotOp, d *sluice.Decision) {
	switch {
	case op == algo.Acquire && d.Allowed:
		if n := slotUnits(d); n > 0 {
			s.m.slots.WithLabelValues(api, "acquired").Add(float64(n))
		}
	case op == algo.Release:
		if n := slotUnits(d); n > 0 {
			s.m.slots.WithLabelValues(api, "released").Add(float64(n))
		}
	case op == algo.Renew && !d.Allowed:
		s.m.slots.WithLabelValues(api, "lost").Inc()
	}
}
