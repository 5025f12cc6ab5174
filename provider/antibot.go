package provider

import (
	"net/url"
	"strings"
)

// The typed tasks of bot-protection walls, Amazon WAF, MTCaptcha and
// DataDome's slider, and the checks of their fields.

// AmazonWAF is an Amazon WAF captcha: the page's window.gokuProps (key,
// iv, context) and, for a widget, its script URLs. The answer is a JSON
// object, {"captcha_voucher","existing_token"}, that the page's
// challenge script exchanges for the aws-waf-token cookie.
type AmazonWAF struct {
	SiteKey         string // gokuProps.key
	IV              string // gokuProps.iv
	Context         string // gokuProps.context: it changes on each load
	PageURL         string
	ChallengeScript string // the challenge.js URL, if the page loads one
	CaptchaScript   string // the captcha.js URL, if the page loads one
	UserAgent       string
	Proxy           string
	ProxyType       string
}

// Task returns the raw form: method amazon_waf.
func (a AmazonWAF) Task() Task {
	p := params{}
	p.set("sitekey", a.SiteKey)
	p.set("iv", a.IV)
	p.set("context", a.Context)
	p.set("pageurl", a.PageURL)
	p.set("challenge_script", a.ChallengeScript)
	p.set("captcha_script", a.CaptchaScript)
	p.set("userAgent", a.UserAgent)
	p.set("proxy", a.Proxy)
	p.set("proxytype", a.ProxyType)
	return Task{Method: "amazon_waf", Params: p}
}

// MTCaptcha is an MTCaptcha widget; the answer is its verified token.
type MTCaptcha struct {
	SiteKey   string // MTPublic-…
	PageURL   string
	UserAgent string
	Proxy     string
	ProxyType string
}

// Task returns the raw form: method mt_captcha.
func (m MTCaptcha) Task() Task {
	p := params{}
	p.set("sitekey", m.SiteKey)
	p.set("pageurl", m.PageURL)
	p.set("userAgent", m.UserAgent)
	p.set("proxy", m.Proxy)
	p.set("proxytype", m.ProxyType)
	return Task{Method: "mt_captcha", Params: p}
}

// DataDome is DataDome's slider captcha. Its answer, a datadome cookie,
// is bound to the proxy's IP and to the user agent, so all four fields
// besides the page are required; a captcha_url with t=bv (the IP is
// banned) is refused.
type DataDome struct {
	CaptchaURL string // the captcha iframe's src
	PageURL    string
	UserAgent  string
	Proxy      string
	ProxyType  string
}

// Task returns the raw form: method datadome.
func (d DataDome) Task() Task {
	p := params{}
	p.set("captcha_url", d.CaptchaURL)
	p.set("pageurl", d.PageURL)
	p.set("userAgent", d.UserAgent)
	p.set("proxy", d.Proxy)
	p.set("proxytype", d.ProxyType)
	return Task{Method: "datadome", Params: p}
}

// fScriptURL is an optional field holding a script's URL.
func fScriptURL(name string) field {
	return field{name, "", func(v string) string {
		if reason := checkPageURL(v); reason != "" {
			return strings.Replace(reason, "https://example.com/login", "https://example.com/challenge.js", 1)
		}
		return ""
	}}
}

// checkDataDomeURL refuses a captcha_url DataDome gave a banned IP
// (t=bv): no solve gets past it.
func checkDataDomeURL(v string) string {
	if reason := checkPageURL(v); reason != "" {
		return strings.Replace(reason, "https://example.com/login", "https://geo.captcha-delivery.com/captcha/?initialCid=…", 1)
	}
	if u, err := url.Parse(strings.TrimSpace(v)); err == nil && u.Query().Get("t") == "bv" {
		return "has t=bv: DataDome has banned the proxy's IP and no solve passes it; use another proxy and send its captcha_url"
	}
	return ""
}
