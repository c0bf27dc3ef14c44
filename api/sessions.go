package api

import (
	"encoding/json"
	"net/http"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/ids"
)

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	key, ok := idempotencyKey(w, r)
	if !ok {
		return
	}
	var req apitype.CreateSessionRequest
	if !decode(w, r, MaxBody, &req) {
		return
	}
	if err := s.rt.CheckSession(req.Provider, req.Options); err != nil {
		writeError(w, err) // every run of the session would fail, or ignore its options
		return
	}
	sess, err := s.st.CreateSession(r.Context(), belay.SessionInput{
		Provider: req.Provider, Model: req.Model, Labels: req.Labels, Options: req.Options, IdempotencyKey: key,
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, sess)
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if st := belay.SessionState(q.Get("state")); st != "" && !st.Valid() {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "state must be idle, active or quarantined", map[string]any{"field": "state"})
		return
	}
	limit, cursor, ok := pageParams(w, r)
	if !ok {
		return
	}
	if sessionsCursor(cursor) != nil {
		badCursor(w, cursor)
		return
	}
	f := belay.SessionFilter{State: belay.SessionState(q.Get("state")), Provider: q.Get("provider"), Limit: limit + 1, Before: cursor}
	list, err := s.st.Sessions(r.Context(), f)
	if err != nil {
		writeError(w, err)
		return
	}
	out := apitype.SessionList{Sessions: list}
	if len(list) > limit {
		out.Sessions = list[:limit]
		out.NextCursor = list[limit-1].ID
	}
	if out.Sessions == nil {
		out.Sessions = []belay.Session{}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Session)
	if !ok {
		return
	}
	sess, err := s.st.Session(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sess)
}

func (s *Server) doctor(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Session)
	if !ok {
		return
	}
	rep, err := s.rt.Doctor(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

func (s *Server) daemonDoctor(w http.ResponseWriter, r *http.Request) {
	if s.opts.DaemonDoctor == nil {
		writeErrorCode(w, http.StatusNotFound, apitype.CodeNotFound, "daemon doctor is not available", nil)
		return
	}
	rep, err := s.opts.DaemonDoctor(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

func (s *Server) transcript(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Session)
	if !ok {
		return
	}
	if s.opts.Export == nil {
		writeErrorCode(w, http.StatusNotFound, apitype.CodeNotFound, "transcript export is not available", nil)
		return
	}
	format := r.URL.Query().Get("format")
	if _, err := s.st.Session(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	stream(w, r, func(sw *streamWriter) error {
		sum, err := s.opts.Export(r.Context(), sw, id, format)
		if sum.Total() > 0 {
			if b, jerr := json.Marshal(sum); jerr == nil {
				w.Header().Set(apitype.TrailerExportNotes, string(b))
			}
		}
		return err
	}, apitype.TrailerExportNotes)
}

func (s *Server) prune(w http.ResponseWriter, r *http.Request) {
	var req apitype.PruneRequest
	if r.ContentLength != 0 && !decode(w, r, MaxBody, &req) {
		return
	}
	rep, err := s.rt.Prune(r.Context(), req.DryRun)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	force := r.URL.Query().Get("force")
	if force != "" && force != "true" && force != "false" {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "force must be true or false", nil)
		return
	}
	if err := s.rt.DeleteSession(r.Context(), r.PathValue("id"), force == "true"); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
