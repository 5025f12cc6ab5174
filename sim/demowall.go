package sim

import (
	"encoding/json"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// The demo site's bot-protection pages. Each shows what its wall puts in
// a page (Amazon WAF's window.gokuProps, an MTCaptcha widget's sitekey,
// DataDome's block page with its captcha iframe) and checks, as the site
// behind the wall would, what a client brings back: the Amazon WAF
// captcha_voucher or the MTCaptcha token posted in the form (once each),
// or the datadome cookie sent with the user agent it was solved with
// (until it expires). Only what this simulator solved for that page's
// sitekey and host passes.

// The bot-protection pages. SiteKey is what a task names the page by:
// gokuProps.key, the MTCaptcha sitekey, the DataDome captcha_url.
var (
	DemoAmazonWAF = DemoSite{Path: "/demo/amazon-waf", SiteKey: "AQIDAHjcYu/GjX+QlghicBgQ/7bFaQZ+m5FKCMDnO+vTbNg96AHDemoCaptchaQ=="}
	DemoMTCaptcha = DemoSite{Path: "/demo/mtcaptcha", SiteKey: "MTPublic-DemoCaptchaQ1"}
	DemoDataDome  = DemoSite{Path: "/demo/datadome", SiteKey: "https://geo.captcha-delivery.com/captcha/?initialCid=DemoCaptchaQ&cid=demo&t=fe&s=1"}
)

// The Amazon WAF page's gokuProps besides its key.
const (
	DemoAmazonWAFIV      = "CgAHbCe2GgAAAAAj"
	DemoAmazonWAFContext = "qoJYgnKsc4ArW+DemoCaptchaQ+context"
)

// ddCookie is the name of DataDome's cookie.
const ddCookie = "datadome"

var wallPages = template.Must(template.New("amazon-waf").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Human verification - captchaq demo</title></head>
<body><h1>Let's confirm you are human</h1>
<div id="captcha-container"></div>
<form id="demo-form" method="post" action="{{.Path}}">
<input type="hidden" name="captcha_voucher" id="captcha_voucher">
<input type="hidden" name="existing_token" id="existing_token">
<p><button type="submit" id="send">Continue</button></p>
</form>
<script>window.gokuProps = {"key": {{.SiteKey}}, "iv": {{.IV}}, "context": {{.Context}}};</script>
</body></html>
{{define "mtcaptcha"}}<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign up - captchaq demo</title></head>
<body><h1>Sign up</h1>
<form id="demo-form" method="post" action="{{.Path}}">
<p><label>Email <input name="email" type="email" value="qa@example.com"></label></p>
<div class="mtcaptcha"><input type="hidden" name="mtcaptcha-verifiedtoken" class="mtcaptcha-verifiedtoken"></div>
<p><button type="submit" id="send">Sign up</button></p>
</form>
<script>var mtcaptchaConfig = {"sitekey": {{.SiteKey}}};</script>
</body></html>
{{end}}
{{define "datadome"}}<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>captchaq demo</title></head>
<body><script>var dd={"rt":"c","cid":"DemoCaptchaQ","t":"fe","s":1,"host":"geo.captcha-delivery.com"};</script>
<iframe title="DataDome CAPTCHA" src="{{.SiteKey}}" srcdoc="<p>DataDome (demo)</p>" width="100%" height="500"></iframe>
</body></html>
{{end}}`))

// wall is one bot-protection page: its family, its template, the form
// field it reads (none: the datadome cookie) and its verdict's title.
type wall struct {
	site  DemoSite
	f     family
	page  string
	field string
	title string
}

var walls = map[string]wall{
	DemoAmazonWAF.Path: {DemoAmazonWAF, familyAmazonWAF, "amazon-waf", "captcha_voucher", "Access granted"},
	DemoMTCaptcha.Path: {DemoMTCaptcha, familyMTCaptcha, "mtcaptcha", "mtcaptcha-verifiedtoken", "Account created"},
	DemoDataDome.Path:  {DemoDataDome, familyDataDome, "datadome", "", "Welcome"},
}

// serveWall serves a bot-protection page: the page, or the verdict on
// what the request brings back.
func (d sites) serveWall(w http.ResponseWriter, r *http.Request, wl wall) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	var value string
	switch {
	case wl.field == "":
		c, err := r.Cookie(ddCookie)
		if err != nil || r.Method != http.MethodGet && r.Method != http.MethodHead {
			// no cookie: DataDome's block page, as the wall answers
			w.WriteHeader(http.StatusForbidden)
			_ = wallPages.ExecuteTemplate(w, wl.page, wl.site)
			return
		}
		value = c.Value
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		_ = wallPages.ExecuteTemplate(w, wl.page, map[string]string{
			"Path": wl.site.Path, "SiteKey": wl.site.SiteKey, "IV": DemoAmazonWAFIV, "Context": DemoAmazonWAFContext,
		})
		return
	case r.Method == http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, maxVerifyBody)
		if err := r.ParseForm(); err != nil {
			http.Error(w, "the form could not be read: "+err.Error(), http.StatusBadRequest)
			return
		}
		value = strings.TrimSpace(r.PostForm.Get(wl.field))
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "GET the page or POST its form", http.StatusMethodNotAllowed)
		return
	}
	codes := d.tokens.checkWall(wl, value, hostOnly(r.Host), r.UserAgent(), d.due())
	title, status := wl.title, http.StatusOK
	if len(codes) > 0 {
		title, status = "Rejected", http.StatusForbidden
	}
	w.WriteHeader(status)
	_ = demoPages.ExecuteTemplate(w, "verdict", map[string]any{
		"Title": title, "Success": len(codes) == 0, "Codes": strings.Join(codes, " "), "Back": wl.site.Path,
	})
}

// checkWall is the site's check of value at wall wl: its error
// codes, none when it passes. A value passes when this simulator issued
// it for the wall's sitekey and host within its kind's lifetime
// (provider.TokenLifetime), once (a DataDome cookie until it expires),
// and a DataDome cookie only from the user agent it was solved with.
func (b *tokenBook) checkWall(wl wall, value, host, userAgent string, now time.Time) []string {
	if value == "" {
		return []string{"missing-input-response"}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	it := b.lookupLocked(value, now)
	switch {
	case it == nil || familyOf(it.kind) != wl.f || it.sitekey != wl.site.SiteKey:
		return []string{"invalid-input-response"}
	case it.used || now.Sub(it.at) > provider.TokenLifetime(it.kind):
		return []string{"timeout-or-duplicate"}
	case it.hostname != host:
		return []string{"hostname-mismatch"}
	case wl.f == familyDataDome && it.userAgent != userAgent:
		return []string{"user-agent-mismatch"}
	}
	it.used = wl.f != familyDataDome
	return nil
}

// checked is the part of answer a that its site checks: an Amazon WAF
// answer's captcha_voucher, a DataDome answer's cookie value, else a.
func (a answer) checked(k provider.Kind) string {
	switch k {
	case provider.KindAmazonWAF:
		var v struct {
			Voucher string `json:"captcha_voucher"`
		}
		_ = json.Unmarshal([]byte(a.raw), &v)
		return v.Voucher
	case provider.KindDataDome:
		name, value, _ := strings.Cut(strings.SplitN(a.raw, ";", 2)[0], "=")
		if name != ddCookie {
			return ""
		}
		return value
	}
	return a.raw
}
