package sim

import (
	"encoding/json"
	"html/template"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
)

// The demo site: a sign-in page with a Turnstile-like widget and a checkout
// page with a reCAPTCHA-v2-like one. Each widget carries its sitekey in the
// DOM and the hidden response field the real widget fills, where the real
// widgets put them; nothing is loaded from outside: a test or an automation
// reads the sitekey, gets a token from captchaq and writes it into the
// field. The reCAPTCHA page also holds what Google's api.js leaves behind
// (the anchor iframe, named a-ID, whose content stays local through
// srcdoc, and window.___grecaptcha_cfg), so tools that find reCAPTCHAs
// that way (puppeteer-extra-plugin-recaptcha) find it. The
// form posts back to the page, whose server checks the token at this
// simulator's siteverify endpoint and shows the verdict in #verdict.

var demoPages = template.Must(template.New("index").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>captchaq demo site</title></head>
<body><h1>captchaq demo site</h1>
<ul><li><a href="/demo/turnstile">Sign in (Turnstile)</a></li><li><a href="/demo/recaptcha">Checkout (reCAPTCHA v2)</a></li><li><a href="/demo/challenge">Catalogue (Cloudflare challenge)</a></li>
<li><a href="/demo/amazon-waf">Amazon WAF</a></li><li><a href="/demo/mtcaptcha">Sign up (MTCaptcha)</a></li>
<li><a href="/demo/datadome">DataDome</a></li></ul>
</body></html>
{{define "turnstile"}}<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in - captchaq demo</title></head>
<body><h1>Sign in</h1>
<form id="demo-form" method="post" action="/demo/turnstile">
<p><label>Email <input name="email" type="email" value="qa@example.com"></label></p>
<p><label>Password <input name="password" type="password" value="demo-password"></label></p>
<div class="cf-turnstile" data-sitekey="{{.SiteKey}}" data-action="login">
<input type="hidden" name="cf-turnstile-response" id="cf-chl-widget-demo_response">
</div>
<p><button type="submit" id="send">Sign in</button></p>
</form></body></html>
{{end}}
{{define "recaptcha"}}<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Checkout - captchaq demo</title></head>
<body><h1>Checkout</h1>
<form id="demo-form" method="post" action="/demo/recaptcha">
<p><label>Card holder <input name="name" value="QA Tester"></label></p>
<div class="g-recaptcha" data-sitekey="{{.SiteKey}}">
<iframe title="reCAPTCHA" name="a-demo0recaptcha" width="304" height="78" src="https://www.google.com/recaptcha/api2/anchor?ar=1&amp;k={{.SiteKey}}&amp;size=normal" srcdoc="<p>reCAPTCHA (demo)</p>"></iframe>
<textarea id="g-recaptcha-response" name="g-recaptcha-response" class="g-recaptcha-response" style="display:none"></textarea>
</div>
<p><button type="submit" id="send">Pay</button></p>
</form>
<script>
window.__google_recaptcha_client = true;
window.___grecaptcha_cfg = {clients: {0: {id: 0, anchor: "demo0recaptcha", widget: {params: {sitekey: {{.SiteKey}}, size: "normal"}}}}};
</script></body></html>
{{end}}
{{define "verdict"}}<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}} - captchaq demo</title></head>
<body><h1 id="verdict" data-success="{{.Success}}">{{.Title}}</h1>
<p>error codes: <span id="error-codes">{{.Codes}}</span></p>
<p>siteverify answered: <code id="siteverify">{{.Answer}}</code></p>
<p><a href="{{.Back}}">again</a></p>
</body></html>
{{end}}`))

// serveDemo serves the demo site under /demo/, its index at / too.
func (d sites) serveDemo(w http.ResponseWriter, r *http.Request) {
	var site DemoSite
	var page, field, verifyPath string
	var fam family
	switch strings.TrimSuffix(r.URL.Path, "/") {
	case "", "/demo":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = demoPages.Execute(w, nil)
		return
	case DemoChallenge.Path:
		d.serveChallenge(w, r)
		return
	case DemoTurnstile.Path:
		site, page, field, verifyPath, fam = DemoTurnstile, "turnstile", "cf-turnstile-response", "/turnstile/v0/siteverify", familyTurnstile
	case DemoRecaptcha.Path:
		site, page, field, verifyPath, fam = DemoRecaptcha, "recaptcha", "g-recaptcha-response", "/recaptcha/api/siteverify", familyRecaptcha
	default:
		if wl, ok := walls[strings.TrimSuffix(r.URL.Path, "/")]; ok {
			d.serveWall(w, r, wl)
			return
		}
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		_ = demoPages.ExecuteTemplate(w, page, site)
		return
	case http.MethodPost:
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "GET the page or POST its form", http.StatusMethodNotAllowed)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxVerifyBody)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "the form could not be read: "+err.Error(), http.StatusBadRequest)
		return
	}

	// The site's server side: the token and the secret go to siteverify,
	// as a real site sends them to Cloudflare or Google.
	form := url.Values{"secret": {site.Secret}, "response": {r.PostForm.Get(field)}, "remoteip": {clientIP(r)}}
	req := httptest.NewRequest(http.MethodPost, verifyPath, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	d.serveSiteverify(rec, req, fam)
	var answer struct {
		Success  bool     `json:"success"`
		Hostname string   `json:"hostname"`
		Codes    []string `json:"error-codes"`
	}
	raw := strings.TrimSpace(rec.Body.String())
	if err := json.Unmarshal([]byte(raw), &answer); err != nil {
		http.Error(w, "siteverify answered no JSON: "+raw, http.StatusBadGateway)
		return
	}

	// A site must also check that the token was solved for its own host.
	title := "Signed in"
	if page == "recaptcha" {
		title = "Order placed"
	}
	if answer.Success && answer.Hostname != hostOnly(r.Host) {
		answer.Success = false
		answer.Codes = []string{"hostname-mismatch"}
	}
	status := http.StatusOK
	if !answer.Success {
		title, status = "Rejected", http.StatusForbidden
	}
	w.WriteHeader(status)
	_ = demoPages.ExecuteTemplate(w, "verdict", map[string]any{
		"Title": title, "Success": answer.Success, "Codes": strings.Join(answer.Codes, " "),
		"Answer": raw, "Back": site.Path,
	})
}

// hostOnly strips the port from a Host header.
func hostOnly(host string) string {
	if u, err := url.Parse("http://" + host); err == nil {
		return u.Hostname()
	}
	return host
}
