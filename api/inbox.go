package api

import (
	"net/http"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/ids"
)

func (s *Server) post(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Session)
	if !ok {
		return
	}
	key, ok := idempotencyKey(w, r)
	if !ok {
		return
	}
	var req apitype.PostRequest
	if !decode(w, r, MaxBody, &req) {
		return
	}
	if req.Key == "" {
		req.Key = key
	}
	d, created, err := s.rt.Post(r.Context(), belay.DeliveryInput{Session: id, Type: req.Type, Key: req.Key, Priority: req.Priority, Data: req.Data, To: req.To, AfterRun: req.AfterRun})
	if err != nil {
		writeError(w, err)
		return
	}
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	}
	writeJSON(w, status, d)
}

func (s *Server) listInbox(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Session)
	if !ok {
		return
	}
	status := belay.DeliveryStatus(r.URL.Query().Get("status"))
	if status != "" && !status.Valid() {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "status must be pending, leased, done or error", map[string]any{"field": "status"})
		return
	}
	limit, cursor, ok := pageParams(w, r)
	if !ok {
		return
	}
	ds, err := s.st.Deliveries(r.Context(), belay.DeliveryFilter{Session: id, Status: status})
	if err != nil {
		writeError(w, err)
		return
	}
	ds, next, ok := deliveriesPage(ds, cursor, limit)
	if !ok {
		badCursor(w, cursor)
		return
	}
	if ds == nil {
		ds = []belay.Delivery{}
	}
	writeJSON(w, http.StatusOK, apitype.DeliveryList{Deliveries: ds, NextCursor: next})
}

func (s *Server) lease(w http.ResponseWriter, r *http.Request) {
	var req apitype.LeaseRequest
	if !decode(w, r, MaxBody, &req) {
		return
	}
	if req.Session != "" {
		if err := ids.Check(ids.Session, req.Session); err != nil {
			writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, err.Error(), nil)
			return
		}
	}
	if req.TTL <= 0 {
		req.TTL = apitype.Duration(time.Minute)
	}
	if req.Max <= 0 {
		req.Max = 1
	}
	wait := min(time.Duration(req.Wait), MaxWait)
	var ds []belay.Delivery
	var err error
	if wait > 0 {
		release, ok := s.acquireWatcher(w)
		if !ok {
			return
		}
		defer release()
	}
	switch {
	case req.To != "" && req.Session != "":
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "an addressed lease (to) covers every session: leave session out", nil)
		return
	case req.To != "":
		ds, err = s.rt.LeaseTo(r.Context(), req.To, req.Owner, time.Duration(req.TTL), min(req.Max, 100), wait)
	default:
		ds, err = s.rt.Lease(r.Context(), req.Session, req.Owner, time.Duration(req.TTL), min(req.Max, 100), wait)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	if ds == nil {
		ds = []belay.Delivery{}
	}
	writeJSON(w, http.StatusOK, apitype.DeliveryList{Deliveries: ds})
}

func (s *Server) settle(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Delivery)
	if !ok {
		return
	}
	var req apitype.SettleRequest
	if !decode(w, r, MaxBody, &req) {
		return
	}
	d, err := s.rt.Settle(r.Context(), id, belay.Settlement{Kind: req.Kind, Epoch: req.Epoch, Result: req.Result, Delay: time.Duration(req.Delay)})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}
