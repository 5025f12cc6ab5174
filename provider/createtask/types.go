package createtask

import (
	"strings"

	"github.com/captchaq/captchaq/provider"
)

// valueKind says how a task field's JSON value maps to an in.php param.
type valueKind uint8

const (
	vString valueKind = iota // a JSON string (a number is taken as its text)
	vFlag                    // a JSON boolean (or 0/1, "true"/"false") ↔ "1"; false is left out
	vNumber                  // a JSON number (or a numeric string) ↔ its text; 0 is left out
)

// field is one task field and the in.php param it carries.
type field struct {
	wire  string   // the createTask name, as 2captcha and Anti-Captcha spell it
	alias []string // other services' names for it
	param string   // the in.php param
	kind  valueKind
}

// taskType is one family of createTask types: the in.php method it is, the
// fields it takes and the solution it answers.
type taskType struct {
	kind   provider.Kind
	method string
	fields []field
	// proxy: the family has proxy variants (RecaptchaV2Task beside
	// RecaptchaV2TaskProxyless); a proxy is optional on them unless needs
	// names it.
	proxy bool
	// needs are fields the services require of the family beyond what
	// in.php requires of its method (CaptchaFox's user agent and proxy).
	needs []need
}

// typeName is one type name of a family: the names clients send, the
// proxy they may carry, and params every task of that name has.
type typeName struct {
	name  string
	t     *taskType
	proxy bool              // the name takes proxy fields
	extra map[string]string // params the name implies (enterprise=1)
	// aliasOnly: accepted from clients but never sent to a provider (another
	// service's name for a type, e.g. NoCaptchaTaskProxyless).
	aliasOnly bool
}

var (
	fWebsiteURL = field{wire: "websiteURL", param: "pageurl"}
	fWebsiteKey = field{wire: "websiteKey", param: "sitekey"}
	fUserAgent  = field{wire: "userAgent", param: "userAgent"}
)

var (
	typeImage = &taskType{kind: provider.KindImage, method: "base64", fields: []field{
		{wire: "body", param: "body"},
		{wire: "phrase", param: "phrase", kind: vFlag},
		{wire: "case", param: "regsense", kind: vFlag},
		{wire: "numeric", param: "numeric", kind: vNumber},
		{wire: "math", param: "calc", kind: vFlag},
		{wire: "minLength", param: "min_len", kind: vNumber},
		{wire: "maxLength", param: "max_len", kind: vNumber},
		{wire: "comment", alias: []string{"textinstructions"}, param: "textinstructions"},
	}}
	typeRecaptchaV2 = &taskType{kind: provider.KindRecaptchaV2, method: "userrecaptcha", proxy: true, fields: []field{
		fWebsiteURL,
		{wire: "websiteKey", param: "googlekey"},
		{wire: "recaptchaDataSValue", param: "data-s"},
		{wire: "isInvisible", param: "invisible", kind: vFlag},
		fUserAgent,
		{wire: "cookies", param: "cookies"},
		fAPIDomain,
	}}
	typeRecaptchaV3 = &taskType{kind: provider.KindRecaptchaV3, method: "userrecaptcha", fields: []field{
		fWebsiteURL,
		{wire: "websiteKey", param: "googlekey"},
		{wire: "minScore", param: "min_score", kind: vNumber},
		{wire: "pageAction", param: "action"},
		{wire: "isEnterprise", param: "enterprise", kind: vFlag},
		fAPIDomain,
	}}
	typeTurnstile = &taskType{kind: provider.KindTurnstile, method: "turnstile", proxy: true, fields: []field{
		fWebsiteURL,
		fWebsiteKey,
		{wire: "action", alias: []string{"pageAction"}, param: "action"},
		{wire: "data", alias: []string{"turnstileCData", "cData"}, param: "data"},
		{wire: "pagedata", alias: []string{"chlPageData"}, param: "pagedata"},
		fUserAgent,
	}}
	typeGeeTest = &taskType{kind: provider.KindGeeTest, method: "geetest", proxy: true, fields: []field{
		fWebsiteURL,
		{wire: "gt", param: "gt"},
		{wire: "challenge", param: "challenge"},
		{wire: "geetestApiServerSubdomain", param: "api_server"},
		fUserAgent,
	}}
	// typeGeeTestV4 is GeeTestTask with version 4: no type name of its own.
	typeGeeTestV4 = &taskType{kind: provider.KindGeeTestV4, method: "geetest_v4", proxy: true, fields: []field{
		fWebsiteURL,
		{wire: "geetestApiServerSubdomain", param: "api_server"},
		fUserAgent,
	}}
	typeHCaptcha = &taskType{kind: provider.KindHCaptcha, method: "hcaptcha", proxy: true, fields: []field{
		fWebsiteURL,
		fWebsiteKey,
		{wire: "isInvisible", param: "invisible", kind: vFlag},
		fUserAgent,
	}}
	typeFunCaptcha = &taskType{kind: provider.KindFunCaptcha, method: "funcaptcha", proxy: true, fields: []field{
		fWebsiteURL,
		{wire: "websitePublicKey", param: "publickey"},
		{wire: "funcaptchaApiJSSubdomain", param: "surl"},
		fUserAgent,
	}}
)

// names are every type name taken, the one sent for a family first (its
// Proxyless name, then its proxy name).
var names = append([]typeName{
	{name: "ImageToTextTask", t: typeImage},
	{name: "RecaptchaV2TaskProxyless", t: typeRecaptchaV2},
	{name: "RecaptchaV2Task", t: typeRecaptchaV2, proxy: true},
	{name: "NoCaptchaTaskProxyless", t: typeRecaptchaV2, aliasOnly: true},
	{name: "NoCaptchaTask", t: typeRecaptchaV2, proxy: true, aliasOnly: true},
	{name: "RecaptchaV2EnterpriseTaskProxyless", t: typeRecaptchaV2, extra: map[string]string{"enterprise": "1"}},
	{name: "RecaptchaV2EnterpriseTask", t: typeRecaptchaV2, proxy: true, extra: map[string]string{"enterprise": "1"}},
	{name: "RecaptchaV3TaskProxyless", t: typeRecaptchaV3, extra: map[string]string{"version": "v3"}},
	{name: "RecaptchaV3Task", t: typeRecaptchaV3, extra: map[string]string{"version": "v3"}, aliasOnly: true},
	{name: "RecaptchaV3EnterpriseTask", t: typeRecaptchaV3, extra: map[string]string{"version": "v3", "enterprise": "1"}, aliasOnly: true},
	{name: "TurnstileTaskProxyless", t: typeTurnstile},
	{name: "TurnstileTask", t: typeTurnstile, proxy: true},
	{name: "AntiTurnstileTaskProxyless", t: typeTurnstile, aliasOnly: true},
	{name: "GeeTestTaskProxyless", t: typeGeeTest},
	{name: "GeeTestTask", t: typeGeeTest, proxy: true},
	{name: "HCaptchaTaskProxyless", t: typeHCaptcha},
	{name: "HCaptchaTask", t: typeHCaptcha, proxy: true},
	{name: "FunCaptchaTaskProxyless", t: typeFunCaptcha},
	{name: "FunCaptchaTask", t: typeFunCaptcha, proxy: true},
	{name: "GridTask", t: typeGrid, extra: map[string]string{"recaptcha": "1"}},
	{name: "LeminTaskProxyless", t: typeLemin},
	{name: "LeminTask", t: typeLemin, proxy: true},
	{name: "CaptchaFoxTask", t: typeCaptchaFox, proxy: true},
	{name: "FriendlyCaptchaTaskProxyless", t: typeFriendly},
	{name: "FriendlyCaptchaTask", t: typeFriendly, proxy: true},
}, antibotNames...)

// byName finds a type name in any letter case.
var byName = func() map[string]typeName {
	m := make(map[string]typeName, len(names))
	for _, n := range names {
		m[strings.ToLower(n.name)] = n
	}
	return m
}()

// TypeNames are the type names ParseTask takes, in the table's order.
func TypeNames() []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n.name
	}
	return out
}

// Methods are the default methods of a createTask provider (as
// provider.Task.RouteMethod names them): the types most services of the
// protocol solve. An image task goes as ImageToTextTask whether it came
// as base64 or post, a grid image (recaptcha=1) as GridTask.
var Methods = []string{"base64", "funcaptcha", "geetest", "geetest_v4", "hcaptcha", "post", "turnstile", "userrecaptcha"}

// Carried are every method a createTask type carries, the only ones a
// createTask provider may list: Methods and those fewer services solve
// (2captcha's CaptchaFox, Friendly Captcha and Lemin types; CapMonster's
// cf_clearance; Amazon WAF, MTCaptcha and DataDome's slider).
var Carried = []string{
	"amazon_waf", "base64", "captchafox", "cloudflare_challenge", "datadome", "friendly_captcha", "funcaptcha",
	"geetest", "geetest_v4", "hcaptcha", "lemin", "mt_captcha", "post", "turnstile", "userrecaptcha",
}

// proxyFields are the proxy's fields on a task of a proxy type.
var proxyFields = []string{"proxyType", "proxyAddress", "proxyPort", "proxyLogin", "proxyPassword"}
