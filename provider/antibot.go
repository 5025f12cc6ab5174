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
	return rawTask("amazon_waf", params{
		"sitekey": a.SiteKey, "iv": a.IV, "context": a.Context, "pageurl": a.PageURL,
		"challenge_script": a.ChallengeScript, "captcha_script": a.CaptchaScript, "userAgent": a.UserAgent,
		"proxy": a.Proxy, "proxytype": a.ProxyType,
	})
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
	return rawTask("mt_captcha", params{
		"sitekey": m.SiteKey, "pageurl": m.PageURL, "userAgent": m.UserAgent, "proxy": m.Proxy, "proxytype": m.ProxyType,
	})
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
	return rawTask("datadome", params{
		"captcha_url": d.CaptchaURL, "pageurl": d.PageURL, "userAgent": d.UserAgent, "proxy": d.Proxy,
		"proxytype": d.ProxyType,
	})
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
