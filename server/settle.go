package server

import (
	"net/http"

	"github.com/sluicehq/sluice/policy"
)

// settleRequest is the body of POST /v1/settle: the real cost of the
// estimate's one path, or its real costs, one per path in the order of
// the check's "paths".
type settleRequest struct {
	SettleID string  `json:"settle_id"`
	Cost     *int64  `json:"cost"`
	Costs    []int64 `json:"costs"`
}

// settleAnswer is the answer of POST /v1/settle.
type settleAnswer struct {
	// Settled is false when the id was settled already, was not settled
	// within its time (it stays counted at its estimate) or was never
	// issued: nothing changed.
	Settled bool `json:"settled"`
}

// handleSettle serves POST /v1/settle: the estimate of a check made with
// "settle_within" is settled at its real cost, or for a check of "paths"
// at its real costs, one per path in their order (policy.Settle),
// once. It is part of the check API, with no admin token: only the holder
// of an id, which is unguessable, can settle it. 200 with "settled"; 400
// for a malformed body or id; 503 when the store failed.
func (s *Server) handleSettle(w http.ResponseWriter, r *http.Request) {
	s.inflight.Add(1)
	defer s.inflight.Done()
	body, ok := s.readBodyOrRefuse(w, r, nil)
	if !ok {
		return
	}
	var req settleRequest
	if err := decodeBody(body, &req); err != nil {
		s.badRequest(w, err)
		return
	}
	switch {
	case req.SettleID == "" || req.Cost == nil && req.Costs == nil:
		s.badRequest(w, bodyErrorf(`want {"settle_id": the id a check with "settle_within" answered, "cost": the real cost} ("costs": one per path, for a check of "paths")`))
		return
	case req.Cost != nil && req.Costs != nil:
		s.badRequest(w, bodyErrorf(`give "cost" (an estimate of one path) or "costs" (one per path), not both`))
		return
	case len(req.Costs) > maxPaths:
		s.badRequest(w, bodyErrorf(`"costs" holds %d costs, more than a check's %d paths`, len(req.Costs), maxPaths))
		return
	}
	costs := req.Costs
	if req.Cost != nil {
		costs = []int64{*req.Cost}
	}
	q := policy.Query{Op: policy.Settle, Ticket: req.SettleID, Paths: make([]policy.PathQuery, len(costs))}
	for i, c := range costs {
		q.Paths[i].Cost = c
	}
	var d policy.Decision
	err := s.checker.Decide(r.Context(), &q, &d)
	settled := d.Settled
	switch {
	case isBadRequest(err):
		s.badRequest(w, err)
		return
	case err != nil:
		s.storeFailed("http", err)
		writeProblem(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
		return
	}
	outcome := "refused"
	if settled {
		outcome = "settled"
	}
	s.m.settles.WithLabelValues(outcome).Inc()
	writeJSON(w, http.StatusOK, settleAnswer{Settled: settled})
}
