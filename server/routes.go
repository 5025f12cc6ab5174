package server

import (
	"context"
	"embed"
	"errors"
	"io/fs"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/captchaq/captchaq/internal/apiform"
)

//go:embed dashboard
var dashboardFiles embed.FS

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern, route string, timed bool, h http.Handler) {
		mux.Handle(pattern, s.instrument(route, timed, h))
	}
	handle("/in.php", "in.php", true, http.HandlerFunc(s.front.handleIn))
	handle("/res.php", "res.php", true, http.HandlerFunc(s.front.handleRes))
	for _, m := range createTaskMethods {
		handle("/"+m, "createtask", true, http.HandlerFunc(s.front.handleCreateTask))
	}
	handle("POST /v1/tasks", "tasks_create", true, s.clients.authed(s.api.handleCreate))
	handle("GET /v1/tasks/{id}", "tasks_get", true, s.clients.authed(s.api.handleGet))
	handle("DELETE /v1/tasks/{id}", "tasks_cancel", true, s.clients.authed(s.api.handleCancel))
	handle("GET /v1/events", "events", false, s.clients.authed(s.api.handleEvents))
	handle("GET /v1/stats", "stats", true, s.clients.authed(s.api.handleStats))
	handle("GET /v1/history", "history", true, s.clients.authed(s.handleHistory))
	handle("GET /v1/reservoirs", "reservoirs", true, s.clients.authed(s.reservoirs.handle))
	handle("GET /v1/deadletters", "deadletters", true, s.clients.authed(s.api.handleDeadLetters))
	handle("POST /v1/deadletters/replay", "deadletters_replay", true, s.clients.authed(s.api.handleReplay))
	if s.pbPath != "" {
		handle(s.pbPath, "pingback", true, s.local.pingbackHandler())
	}
	mux.Handle("GET /metrics", s.adminOnly(s.MetricsHandler()))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.ready(r.Context()); err != nil {
			if us := (unreadableStore{}); errors.As(err, &us) {
				s.log.Warn("not ready: the store cannot be read", "err", us.cause)
			}
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	sub, _ := fs.Sub(dashboardFiles, "dashboard")
	mux.Handle("/", noKeyInURL(http.FileServerFS(sub)))
	return securityHeaders(mux)
}

// noKeyInURL refuses a dashboard address that carries a key: it would
// stay in the browser's history and logs. The page asks for the key in
// its form and sends it as Authorization: Bearer.
func noKeyInURL(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := apiform.QueryKey(r); ok {
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, "A key does not go in the address: it stays in the browser's history and logs. Open / without it and type it into the page's form (the page sends it as Authorization: Bearer). If this address was shared or bookmarked, give the admin client a new key.", http.StatusBadRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// MetricsHandler serves the Prometheus metrics without a key check, for an
// operator-only listener (serve --metrics-listen); on the main listener
// /metrics needs an admin client's key.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{})
}

// adminOnly lets through requests with an admin client's key as
// Authorization: Bearer (Prometheus: authorization: {type: Bearer,
// credentials: KEY}).
func (s *Server) adminOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		cs := s.clients.client(strings.TrimSpace(key))
		if cs == nil || !cs.Admin {
			w.Header().Set("WWW-Authenticate", `Bearer realm="captchaq"`)
			apiFail(w, http.StatusUnauthorized, "Authorization", "the metrics need an admin client's key: send Authorization: Bearer <admin key>, or scrape serve's --metrics-listen address")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// dashboardCSP lets the dashboard run its own scripts and styles and call
// its own origin, nothing else, and no page be framed (clickjacking).
const dashboardCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// securityHeaders sets on every answer: no framing, the content security
// policy, no type sniffing, and no Referer sent from the dashboard.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Content-Security-Policy", dashboardCSP)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

// ready says why the server cannot take work: not started, or what the
// Backend says (the local queue: the store unreadable, or sending paused
// by an account error that will not lift by itself).
func (s *deps) ready(ctx context.Context) error {
	if !s.started.Load() {
		return errors.New("queue not started")
	}
	return s.backend.Ready(ctx)
}
