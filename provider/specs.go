package provider

import (
	"fmt"
	"strconv"
)

// The method-spec table: what each kind of task requires and accepts, and
// the fields it is built from.

const proxyHint = "the proxy the answer will be used through, as user:pass@host:port"

// field describes one in.php field for validation messages.
type field struct {
	name  string
	hint  string              // what the value is, for "required" messages
	check func(string) string // returns the reason a value is bad, or ""
}

// methodSpec is what one kind requires and accepts.
type methodSpec struct {
	kind     Kind
	required []field
	optional []field
	// extra runs after the field checks, for rules that span fields.
	extra func(t Task) error
}

var (
	fPageURL   = field{"pageurl", "the URL of the page that shows the captcha", checkPageURL}
	fGoogleKey = field{"googlekey", "the reCAPTCHA site key (data-sitekey in the page)", nil}
	fSiteKey   = field{"sitekey", "the widget's site key (data-sitekey in the page)", nil}
	fProxy     = field{"proxy", proxyHint, checkProxy}
	fProxyType = field{"proxytype", "the proxy's protocol: one of HTTP, HTTPS, SOCKS4, SOCKS5", checkProxyType}
	fUserAgent = field{"userAgent", "", nil}
	fAPIServer = field{"api_server", "", checkHost}
	fTextInstr = field{"textinstructions", `what to select, e.g. "select all images with a bus", or imginstructions: an image of it, base64-encoded`, nil}
	// fRecaptchaDomain is where the widget loads from (createTask's apiDomain).
	fRecaptchaDomain = field{"domain", "", checkRecaptchaDomain}
)

func flag(name string) field  { return field{name, "", checkFlag} }
func plain(name string) field { return field{name, "", nil} }
func intIn(name string, lo, hi int) field {
	return field{name, "", func(v string) string {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return fmt.Sprintf("%q is not a whole number from %d to %d", v, lo, hi)
		}
		return ""
	}}
}

var proxyFields = []field{fProxy, fProxyType}

var imageOptional = []field{
	flag("phrase"), flag("regsense"), intIn("numeric", 0, 4), flag("calc"),
	intIn("min_len", 0, 20), intIn("max_len", 0, 20), plain("lang"), fTextInstr,
}

// specs is the method-spec table: required and optional fields per kind.
var specs = map[Kind]methodSpec{
	KindImage: {kind: KindImage, optional: imageOptional},
	KindGrid: {kind: KindGrid, extra: gridInstructions,
		optional: []field{fTextInstr, {"imginstructions", "", checkBLSImage}, flag("recaptcha"),
			intIn("recaptcharows", 1, 10), intIn("recaptchacols", 1, 10), plain("lang")}},
	KindBLS: {kind: KindBLS,
		required: []field{
			{"instructions", "the numeric code shown above the grid, e.g. 664", nil},
			{"image_base64_1", "the first grid image as base64 (image_base64_1 … image_base64_9, in reading order)", checkBLSImage},
		},
		optional: blsImages()},
	KindRecaptchaV2: {kind: KindRecaptchaV2, required: []field{fGoogleKey, fPageURL},
		optional: append([]field{flag("invisible"), flag("enterprise"), plain("data-s"), fUserAgent, plain("cookies"), plain("version"), fRecaptchaDomain}, proxyFields...)},
	KindRecaptchaV3: {kind: KindRecaptchaV3, required: []field{fGoogleKey, fPageURL},
		optional: []field{plain("action"), {"min_score", "", checkScore}, flag("enterprise"), plain("version"), fRecaptchaDomain}},
	KindTurnstile: {kind: KindTurnstile, required: []field{fSiteKey, fPageURL},
		optional: append([]field{plain("action"), plain("data"), plain("pagedata"), fUserAgent}, proxyFields...)},
	KindCloudflareChallenge: {kind: KindCloudflareChallenge,
		required: []field{fPageURL, fProxy, fProxyType},
		optional: []field{fUserAgent, plain("sitekey"), {"htmlPageBase64", "", checkHTMLPage}}},
	KindGeeTest: {kind: KindGeeTest,
		required: []field{
			{"gt", "the GeeTest gt value from the page", nil},
			{"challenge", "a fresh GeeTest challenge value from the page (it expires quickly)", nil},
			fPageURL,
		},
		optional: []field{fAPIServer, plain("version")}},
	KindCaptchaFox: {kind: KindCaptchaFox, required: []field{fSiteKey, fPageURL},
		optional: append([]field{fAPIServer, fUserAgent}, proxyFields...)},
	KindFriendlyCaptcha: {kind: KindFriendlyCaptcha, required: []field{fSiteKey, fPageURL}, optional: proxyFields},
	KindHCaptcha: {kind: KindHCaptcha, required: []field{fSiteKey, fPageURL},
		optional: append([]field{flag("invisible"), plain("data"), fUserAgent, plain("domain")}, proxyFields...)},
	KindFunCaptcha: {kind: KindFunCaptcha,
		required: []field{{"publickey", "the FunCaptcha public key (data-pkey in the page)", nil}, fPageURL},
		optional: append([]field{plain("surl"), plain("data[blob]"), fUserAgent}, proxyFields...)},
	KindGeeTestV4: {kind: KindGeeTestV4,
		required: []field{{"captcha_id", "the GeeTest v4 captcha_id from the page", nil}, fPageURL},
		optional: []field{fAPIServer, plain("version")}},
	KindLemin: {kind: KindLemin,
		required: []field{{"captcha_id", "the Lemin captcha id from the page", nil}, fPageURL},
		optional: append([]field{plain("div_id"), fAPIServer, fUserAgent}, proxyFields...)},
	KindAmazonWAF: {kind: KindAmazonWAF,
		required: []field{
			{"sitekey", "key of window.gokuProps in the WAF page", nil},
			{"iv", "iv of window.gokuProps in the WAF page", nil},
			{"context", "context of window.gokuProps in the WAF page (it changes on each load)", nil},
			fPageURL,
		},
		optional: append([]field{fScriptURL("challenge_script"), fScriptURL("captcha_script"), fUserAgent}, proxyFields...)},
	KindMTCaptcha: {kind: KindMTCaptcha, required: []field{
		{"sitekey", "the MTCaptcha site key (MTPublic-…, sitekey in mtcaptchaConfig)", nil}, fPageURL},
		optional: append([]field{fUserAgent}, proxyFields...)},
	KindDataDome: {kind: KindDataDome,
		required: []field{
			{"captcha_url", "the captcha iframe's src (https://geo.captcha-delivery.com/captcha/?…)", checkDataDomeURL},
			fPageURL,
			{"userAgent", "the user agent of the browser that will send the cookie: DataDome binds the cookie to it", nil},
			{"proxy", proxyHint + ": DataDome binds the cookie to the IP that solved it", checkProxy},
			fProxyType,
		}},
}

func blsImages() []field {
	fs := make([]field, 0, 8)
	for i := 2; i <= 9; i++ {
		fs = append(fs, field{"image_base64_" + strconv.Itoa(i), "", checkBLSImage})
	}
	return fs
}
