package provider

import (
	"fmt"
	"slices"
	"strings"
)

// CaptchaAIMethods are the methods CaptchaAI solves: what Task.Validate
// and Task.Kind accept, and a provider lane's default at CaptchaAI's URL.
var CaptchaAIMethods = []string{
	"base64", "bls", "captchafox", "cloudflare_challenge", "friendly_captcha",
	"geetest", "lemin", "post", "turnstile", "userrecaptcha",
}

// CommonMethods are the types most services of the protocol solve
// (2captcha, RuCaptcha and their kin): a provider lane's default at any
// other URL.
var CommonMethods = []string{
	"amazon_waf", "base64", "datadome", "funcaptcha", "geetest", "geetest_v4", "hcaptcha", "mt_captcha",
	"post", "turnstile", "userrecaptcha",
}

// KnownMethods are every method captchaq can validate, sorted: the
// CaptchaAI methods and those only other services solve.
var KnownMethods = []string{
	"amazon_waf", "base64", "bls", "captchafox", "cloudflare_challenge", "datadome", "friendly_captcha",
	"funcaptcha", "geetest", "geetest_v4", "hcaptcha", "lemin", "mt_captcha", "post", "turnstile",
	"userrecaptcha",
}

// typeNames name each method's captcha type as users know it, for
// "unsupported" messages; the ones with no spec are types captchaq knows
// of but cannot validate, so no provider lane may list them.
var typeNames = map[string]string{
	"base64":               "image",
	"post":                 "image",
	"bls":                  "BLS",
	"captchafox":           "CaptchaFox",
	"cloudflare_challenge": "Cloudflare Challenge",
	"friendly_captcha":     "Friendly Captcha",
	"geetest":              "GeeTest v3",
	"lemin":                "Lemin",
	"turnstile":            "Cloudflare Turnstile",
	"userrecaptcha":        "reCAPTCHA",
	"hcaptcha":             "hCaptcha",
	"funcaptcha":           "FunCaptcha (Arkose Labs)",
	"geetest_v4":           "GeeTest v4",
	"amazon_waf":           "Amazon WAF captcha",
	"keycaptcha":           "KeyCaptcha",
	"capy":                 "Capy puzzle",
	"mt_captcha":           "MTCaptcha",
	"datadome":             "DataDome slider",
	"cybersiara":           "CyberSiARA",
	"tencent":              "Tencent captcha",
	"cutcaptcha":           "CutCaptcha",
	"audio":                "audio captcha",
	"rotatecaptcha":        "rotate captcha",
}

// methodAliases are other names for a method, in lower case.
var methodAliases = map[string]string{
	"arkose": "funcaptcha", "arkoselabs": "funcaptcha",
	"geetestv4": "geetest_v4", "geetest4": "geetest_v4",
	"mtcaptcha": "mt_captcha",
}

func unsupportedError(typ, method string, supported []string) error {
	return &Error{
		Op:    "validate",
		Code:  CodeUnsupportedType,
		Class: ClassTask,
		Text: fmt.Sprintf("unsupported captcha type %s (method %q): the provider does not support it; supported methods: %s",
			typ, method, strings.Join(supported, ", ")),
	}
}

// RouteMethod is the method that decides which providers can solve t:
// Method in lower case with aliases resolved, and "geetest_v4" for a
// GeeTest task of version 4. It is what a provider lane's methods list
// names.
func (t Task) RouteMethod() string {
	m := strings.ToLower(strings.TrimSpace(t.Method))
	if a, ok := methodAliases[m]; ok {
		return a
	}
	if m == "geetest" {
		switch strings.ToLower(strings.TrimSpace(t.Params["version"])) {
		case "4", "v4":
			return "geetest_v4"
		}
	}
	return m
}

// wireMethod is the method a provider is sent: Method, or the protocol's
// name for it when it is another name (mtcaptcha, arkose).
func (t Task) wireMethod() string {
	if a, ok := methodAliases[strings.ToLower(strings.TrimSpace(t.Method))]; ok {
		return a
	}
	return t.Method
}

// TypeName is the captcha type of a method as users know it ("hCaptcha"
// for "hcaptcha"), or "" for a method captchaq does not know.
func TypeName(method string) string { return typeNames[method] }

// Kind tells which kind of task t is. It fails for an unknown method and
// for types CaptchaAI does not solve (errors.Is(err, ErrUnsupportedType));
// it does not check the other fields (Validate does).
func (t Task) Kind() (Kind, error) { return t.KindFor(CaptchaAIMethods) }

// KindFor is Kind for a provider that solves the given methods (names
// as RouteMethod gives them).
func (t Task) KindFor(supported []string) (Kind, error) {
	m := strings.TrimSpace(t.Method)
	if m == "" {
		return "", &ValidationError{Field: "method", Reason: "required; one of " + strings.Join(supported, ", ")}
	}
	lm := strings.ToLower(m)
	route := t.RouteMethod()
	if name, known := typeNames[route]; known && !slices.Contains(supported, route) {
		shown := m
		if route == "geetest_v4" && lm == "geetest" {
			shown = m + " version=" + t.Params["version"]
		}
		return "", unsupportedError(name, shown, supported)
	}
	if lm != m {
		if slices.Contains(KnownMethods, lm) {
			return "", &ValidationError{Field: "method", Reason: fmt.Sprintf("%q must be written in lower case: %q", m, lm)}
		}
	}
	version := strings.ToLower(strings.TrimSpace(t.Params["version"]))
	switch route {
	case "base64", "post":
		if isTrue(t.Params["recaptcha"]) {
			return KindGrid, nil
		}
		return KindImage, nil
	case "userrecaptcha":
		switch version {
		case "", "v2", "2":
			return KindRecaptchaV2, nil
		case "v3", "3":
			return KindRecaptchaV3, nil
		}
		return "", &ValidationError{Field: "params.version", Reason: fmt.Sprintf("%q is not a reCAPTCHA version; use v3 for reCAPTCHA v3, or leave it out for v2", t.Params["version"])}
	case "geetest":
		switch version {
		case "", "3", "v3":
			return KindGeeTest, nil
		}
		return "", &ValidationError{Field: "params.version", Reason: fmt.Sprintf("%q is not a GeeTest version the provider solves; leave it out for GeeTest v3, or use 4 for GeeTest v4", t.Params["version"])}
	case "geetest_v4":
		return KindGeeTestV4, nil
	case "hcaptcha":
		return KindHCaptcha, nil
	case "funcaptcha":
		return KindFunCaptcha, nil
	case "bls":
		return KindBLS, nil
	case "turnstile":
		return KindTurnstile, nil
	case "cloudflare_challenge":
		return KindCloudflareChallenge, nil
	case "captchafox":
		return KindCaptchaFox, nil
	case "friendly_captcha":
		return KindFriendlyCaptcha, nil
	case "lemin":
		return KindLemin, nil
	case "amazon_waf":
		return KindAmazonWAF, nil
	case "mt_captcha":
		return KindMTCaptcha, nil
	case "datadome":
		return KindDataDome, nil
	}
	return "", &ValidationError{Field: "method", Reason: fmt.Sprintf("unknown method %q; supported: %s", m, strings.Join(supported, ", "))}
}
