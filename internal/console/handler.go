// The console's HTTP side: the page, the snapshot stream and the actions.

package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
)

// Handler serves the page, its assets and its data, all under relative
// paths so that it can be mounted anywhere (/console/ on the secure port).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	mux.Handle("GET /", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setSecurityHeaders(w)
		files.ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET /api/snapshot", func(w http.ResponseWriter, r *http.Request) {
		view, err := ParseView(r.URL.Query())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		data, _ := s.snapshotJSON(view)
		_, _ = w.Write(data)
	})
	mux.HandleFunc("GET /api/calls", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.sampler.series())
	})
	mux.HandleFunc("GET /api/stream", s.stream)
	mux.HandleFunc("POST /api/actions", s.action)
	return mux
}

// setSecurityHeaders keeps the page to its own assets: nothing is loaded
// from elsewhere, and no other site may frame it.
func setSecurityHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
}

// stream pushes the snapshot of the view the query asks for (ParseView)
// when it changes and the call series every interval, as server-sent
// events. A page whose filters change opens a new stream.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	view, err := ParseView(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	// An open page keeps the watches running, however quiet the cluster.
	_, release := s.use()
	defer release()
	ctx := r.Context()
	sent := ^uint64(0) // the change count the page has; none yet
	send := func(event string, data []byte) error {
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data); err != nil {
			return err
		}
		flusher.Flush()
		return nil
	}
	t := s.opts.Clock.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		if s.version.Load() != sent {
			snap, v := s.snapshotJSON(view)
			if snap != nil && v != sent {
				if err := send("snapshot", snap); err != nil {
					return
				}
				sent = v
			}
		}
		calls, _ := json.Marshal(s.sampler.series())
		if err := send("calls", calls); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// actionRequest is the body of POST api/actions.
type actionRequest struct {
	Name   string `json:"name"`
	Target string `json:"target"`
}

// action runs one of the Actions. A custom header is required, which a
// form on another site cannot send without a CORS preflight this server
// never answers.
func (s *Server) action(w http.ResponseWriter, r *http.Request) {
	if s.opts.Actions == nil {
		http.Error(w, "the console is read-only: actions are off (outrigger dev --console-actions turns them on for the sim cloud)", http.StatusForbidden)
		return
	}
	if r.Header.Get("X-Outrigger-Console") != "1" {
		http.Error(w, "missing X-Outrigger-Console header", http.StatusForbidden)
		return
	}
	var req actionRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
		http.Error(w, "malformed action: "+err.Error(), http.StatusBadRequest)
		return
	}
	msg, err := s.opts.Actions.Do(r.Context(), req.Name, req.Target)
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, ErrUnknownAction) {
			status = http.StatusBadRequest
		}
		http.Error(w, err.Error(), status)
		return
	}
	s.opts.Log.Info("Console action", "action", req.Name, "target", req.Target, "result", msg)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"result": msg})
}

// Owner is one provider of this Outrigger, with what it serves.
