package sim

import (
	"encoding/json"
	"net/http"
)

// clearanceOf reads a Cloudflare Challenge answer: its cf_clearance cookie
// and the user agent the cookie is bound to.
func clearanceOf(answer string) (cookie, userAgent string) {
	var a struct {
		Clearance string `json:"cf_clearance"`
		UserAgent string `json:"user_agent"`
	}
	_ = json.Unmarshal([]byte(answer), &a) // the simulator's own JSON
	return a.Clearance, a.UserAgent
}

// serveChallenge is the demo's page behind a Cloudflare challenge, as
// Cloudflare's edge checks it: a request with a cf_clearance cookie this
// simulator issued for the page's host, sent with the user agent it was
// solved with, gets the page (200, #verdict "Passed"); any other gets the
// challenge (403, #verdict "Rejected", the reason in #error-codes:
// missing-cf-clearance, invalid-cf-clearance, user-agent-mismatch or
// hostname-mismatch). A cookie is good as long as tokens are remembered
// (twice the longer siteverify lifetime), for any number of requests.
func (d sites) serveChallenge(w http.ResponseWriter, r *http.Request) {
	var cookie string
	if c, err := r.Cookie("cf_clearance"); err == nil {
		cookie = c.Value
	}
	now := d.due()
	d.tokens.mu.Lock()
	it := d.tokens.lookupLocked(cookie, now)
	code := ""
	switch {
	case cookie == "":
		code = "missing-cf-clearance"
	case it == nil || familyOf(it.kind) != familyChallenge:
		code = "invalid-cf-clearance"
	case it.userAgent != r.UserAgent():
		code = "user-agent-mismatch"
	case it.hostname != hostOnly(r.Host):
		code = "hostname-mismatch"
	}
	d.tokens.mu.Unlock()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	title, status := "Passed", http.StatusOK
	if code != "" {
		title, status = "Rejected", http.StatusForbidden
	}
	w.WriteHeader(status)
	_ = demoPages.ExecuteTemplate(w, "verdict", map[string]any{
		"Title": title, "Success": code == "", "Codes": code, "Answer": "", "Back": DemoChallenge.Path,
	})
}
