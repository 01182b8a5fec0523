package server

// The admin API (admin token): a path's state, its reset, its consumers,
// the holders of its slots, and changes outside a request (penalty,
// reward, block, unblock).

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

// admin wraps an admin handler: 404 when no token is configured, 401
// unless the request carries "Authorization: Bearer <token>" (compared in
// constant time, over SHA-256 digests so that the length does not leak
// either).
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	want := sha256.Sum256([]byte(s.adminToken))
	return func(w http.ResponseWriter, r *http.Request) {
		if s.adminToken == "" {
			notFound(w, r) // as any unknown path: nothing shows the admin API exists
			return
		}
		auth := r.Header.Get("Authorization")
		tok, ok := strings.CutPrefix(auth, "Bearer ")
		got := sha256.Sum256([]byte(tok))
		if !ok || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-admin"`)
			writeProblem(w, http.StatusUnauthorized, "the admin API needs Authorization: Bearer <admin token>")
			return
		}
		h(w, r)
	}
}

// adminPath reads the path named by the repeated path query parameter.
func adminPath(w http.ResponseWriter, r *http.Request) ([]string, bool) {
	path := r.URL.Query()["path"]
	if len(path) == 0 {
		writeProblem(w, http.StatusBadRequest, "name a key by its path: ?path=user&path=alex&path=trade")
		return nil, false
	}
	if len(path) > maxPathSegments {
		writeProblem(w, http.StatusBadRequest, "path has too many segments")
		return nil, false
	}
	if err := validPath(path); err != nil {
		writeProblem(w, http.StatusBadRequest, err.Error())
		return nil, false
	}
	return path, true
}

// handleState serves GET /admin/v1/state: a peek (cost 0, nothing
// consumed) of every level of the path (AppendDecisionJSON).
func (s *Server) handleState(w http.ResponseWriter, r *http.Request) {
	path, ok := adminPath(w, r)
	if !ok {
		return
	}
	d, err := s.peek(r.Context(), path)
	if err != nil {
		s.adminStoreError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, json.RawMessage(AppendDecisionJSON(nil, &d)))
}

// peek decides path at cost 0: its levels' state, nothing consumed.
func (s *Server) peek(ctx context.Context, path []string) (policy.Decision, error) {
	var d policy.Decision
	err := s.checker.Decide(ctx, &policy.Query{Paths: []policy.PathQuery{{Path: path}}}, &d)
	return d, err
}

// handleReset serves DELETE /admin/v1/state: every limit of the path's
// own levels forgets its state, and the levels their consumers lists, and with ?levels=all the levels every
// caller shares too (such as tigerfeeding above tigerfeeding/*), which
// resetting one caller would otherwise reset for all; the answer lists
// the keys reset.
func (s *Server) handleReset(w http.ResponseWriter, r *http.Request) {
	path, ok := adminPath(w, r)
	if !ok {
		return
	}
	rs, ok := s.store.(store.Resetter)
	if !ok {
		writeProblem(w, http.StatusNotImplemented, "the store cannot reset keys")
		return
	}
	all := r.URL.Query().Get("levels")
	if all != "" && all != "all" {
		writeProblem(w, http.StatusBadRequest, `levels must be "all" (reset shared levels too) or left out`)
		return
	}
	m := s.current.Load().Match(path)
	reqs := []store.Request{}
	keys := []string{}
	var lists []store.Request // the levels' consumers lists
	for _, h := range m.Hits {
		if h.Shared && all == "" {
			continue
		}
		lists = append(lists, store.Request{Key: h.Key, Tag: h.Tag})
		for j := range h.Limits {
			r := h.Request(j, 0)
			reqs = append(reqs, r)
			keys = append(keys, r.Key)
		}
	}
	if len(reqs) > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), max(s.timeout, time.Second))
		defer cancel()
		if err := rs.Reset(ctx, reqs); err != nil {
			s.adminStoreError(w, err)
			return
		}
		if cl, ok := s.store.(store.ConsumerLog); ok {
			if err := cl.ResetConsumers(ctx, lists); err != nil {
				s.adminStoreError(w, err)
				return
			}
		}
	}
	s.log.Info("admin reset", "path", path, "keys", keys)
	writeJSON(w, http.StatusOK, map[string]any{"reset": keys})
}

// consumersJSON is the answer of GET /admin/v1/consumers: for each level
// of the path, its recent consumers, newest first.
type consumersJSON struct {
	Levels []levelConsumersJSON `json:"levels"`
}

// levelConsumersJSON is one level's consumers list.
type levelConsumersJSON struct {
	Pattern   string     `json:"pattern"`
	Key       string     `json:"key"`
	Consumers []consumer `json:"consumers"`
}

// handleConsumers serves GET /admin/v1/consumers.
func (s *Server) handleConsumers(w http.ResponseWriter, r *http.Request) {
	path, ok := adminPath(w, r)
	if !ok {
		return
	}
	m := s.current.Load().Match(path)
	out := consumersJSON{Levels: []levelConsumersJSON{}}
	ctx, cancel := context.WithTimeout(r.Context(), max(s.timeout, time.Second))
	defer cancel()
	for _, lv := range m.Hits {
		cs, err := s.consumers.recent(ctx, lv.Key, lv.Tag)
		if err != nil {
			s.adminStoreError(w, err)
			return
		}
		out.Levels = append(out.Levels, levelConsumersJSON{Pattern: lv.Pattern, Key: lv.Key, Consumers: cs})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) adminStoreError(w http.ResponseWriter, err error) {
	if isBadRequest(err) {
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	s.m.storeErrors.Inc()
	writeProblem(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
}

// maxHoldersListed bounds the holders GET /admin/v1/holders lists per
// level (a key has up to algo.MaxSlots); Total still counts them all.
const maxHoldersListed = 1000

// holdersJSON is the answer of GET /admin/v1/holders: for each
// concurrency level of the path, who holds its slots.
type holdersJSON struct {
	Levels []levelHoldersJSON `json:"levels"`
}

// levelHoldersJSON is one concurrency level's holders, the earliest hold
// first, at most maxHoldersListed of Total.
type levelHoldersJSON struct {
	Pattern string       `json:"pattern"`
	Key     string       `json:"key"`
	Limit   int64        `json:"limit"`
	Held    int64        `json:"held"`
	Total   int          `json:"total"`
	Holders []holderJSON `json:"holders"`
}

// holderJSON is one holder: its permit id (empty for slots taken for no
// permit, such as Envoy's), its slots and when its hold ends.
type holderJSON struct {
	Permit   string `json:"permit,omitempty"`
	Units    int64  `json:"units"`
	HoldEnds string `json:"lease_ends"` // RFC 3339, µs; the wire keeps its first name
	LeftNs   int64  `json:"lease_left_ns"`
}

// handleHolders serves GET /admin/v1/holders: the holders of every
// concurrency limit on the path, with their holds.
func (s *Server) handleHolders(w http.ResponseWriter, r *http.Request) {
	path, ok := adminPath(w, r)
	if !ok {
		return
	}
	hl, ok := s.store.(store.HolderLister)
	if !ok {
		writeProblem(w, http.StatusNotImplemented, "the store cannot list holders")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), max(s.timeout, time.Second))
	defer cancel()
	now := time.Now()
	if c, ok := s.store.(store.Clock); ok {
		t, err := c.Now(ctx)
		if err != nil {
			s.adminStoreError(w, err)
			return
		}
		now = t
	}
	out := holdersJSON{Levels: []levelHoldersJSON{}}
	m := s.current.Load().Match(path)
	for _, h := range m.Hits {
		for j := range h.Limits {
			req := h.Request(j, 0)
			c, ok := req.Plan.Concurrency()
			if !ok {
				continue
			}
			req.Time = now
			hs, err := hl.Holders(ctx, req)
			if err != nil {
				s.adminStoreError(w, err)
				return
			}
			lv := levelHoldersJSON{Pattern: h.Pattern, Key: req.Key, Limit: c.Count, Total: len(hs), Holders: []holderJSON{}}
			for i, x := range hs {
				lv.Held += x.Units
				if i >= maxHoldersListed {
					continue
				}
				hj := holderJSON{Units: x.Units, HoldEnds: time.UnixMicro(x.End).UTC().Format("2006-01-02T15:04:05.000000Z07:00"), LeftNs: int64(time.UnixMicro(x.End).Sub(now))}
				if x.Permit != 0 {
					hj.Permit = strconv.FormatInt(x.Permit, 10)
				}
				lv.Holders = append(lv.Holders, hj)
			}
			out.Levels = append(out.Levels, lv)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

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

// ChangeJSON is the answer of an admin change (and of sluice block,
// penalty...): the keys changed and a peek of the path afterwards
// (AppendDecisionJSON).
type ChangeJSON struct {
	Changed []string        `json:"changed"`
	State   json.RawMessage `json:"state"`
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
		keys, err := s.checker.Change(r.Context(), time.Time{}, req.Path, ch)
		if err != nil {
			s.adminStoreError(w, err)
			return
		}
		d, err := s.peek(r.Context(), req.Path)
		if err != nil {
			s.adminStoreError(w, err)
			return
		}
		s.log.Info("admin "+kind, "path", req.Path, "keys", keys)
		writeJSON(w, http.StatusOK, ChangeJSON{Changed: keys, State: AppendDecisionJSON(nil, &d)})
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
