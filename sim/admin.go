package sim

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// serveAdmin serves the /sim/ API, with Config.AdminKey as a Bearer
// token when one is set:
//
//	GET  /sim/stats        the Stats document
//	POST /sim/stats/reset  ResetStats; answers the fresh Stats
//	GET  /sim/account      the Account state
//	POST /sim/account      set bad_key, zero_balance, ip_banned (form or
//	                       query fields "1"/"true" or "0"/"false"); fields
//	                       not given keep their value; answers the Account
//	POST /sim/unban        lift every poll ban
func (s *Server) serveAdmin(w http.ResponseWriter, r *http.Request) {
	if s.cfg.AdminKey != "" {
		key, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(key)), []byte(s.cfg.AdminKey)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="captchaq sim"`)
			writeAdmin(w, http.StatusUnauthorized, map[string]string{"error": "the /sim/ endpoints need the simulator's admin key: send Authorization: Bearer <key>"})
			return
		}
	}
	switch r.URL.Path {
	case "/sim/stats":
		if !allow(w, r, http.MethodGet) {
			return
		}
		writeAdmin(w, http.StatusOK, s.Stats())
	case "/sim/stats/reset":
		if !allow(w, r, http.MethodPost) {
			return
		}
		s.ResetStats()
		writeAdmin(w, http.StatusOK, s.Stats())
	case "/sim/account":
		switch r.Method {
		case http.MethodGet:
			writeAdmin(w, http.StatusOK, s.Account())
		case http.MethodPost:
			if err := r.ParseForm(); err != nil {
				writeAdmin(w, http.StatusBadRequest, map[string]string{"error": "cannot read the form: " + err.Error()})
				return
			}
			s.mu.Lock()
			a := s.gate.account
			fields := []struct {
				name string
				v    *bool
			}{{"bad_key", &a.BadKey}, {"zero_balance", &a.ZeroBalance}, {"ip_banned", &a.IPBanned}}
			for _, f := range fields {
				if _, ok := r.Form[f.name]; !ok {
					continue
				}
				b, err := strconv.ParseBool(r.Form.Get(f.name))
				if err != nil {
					s.mu.Unlock()
					writeAdmin(w, http.StatusBadRequest, map[string]string{"error": f.name + " must be 1, 0, true or false"})
					return
				}
				*f.v = b
			}
			s.gate.account = a
			s.mu.Unlock()
			writeAdmin(w, http.StatusOK, a)
		default:
			allow(w, r, http.MethodGet, http.MethodPost)
		}
	case "/sim/unban":
		if !allow(w, r, http.MethodPost) {
			return
		}
		s.Unban()
		writeAdmin(w, http.StatusOK, map[string]bool{"ok": true})
	default:
		writeAdmin(w, http.StatusNotFound, map[string]string{"error": "unknown path; see /sim/stats, /sim/stats/reset, /sim/account, /sim/unban"})
	}
}

// allow answers 405 unless the method is one of methods.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", methods[0])
	writeAdmin(w, http.StatusMethodNotAllowed, map[string]string{"error": "use " + methods[0]})
	return false
}

func writeAdmin(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
