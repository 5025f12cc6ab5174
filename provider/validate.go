package provider

import (
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/captchaq/captchaq/internal/checks"
)

// ValidationError says which field of a task is wrong and how to fix it.
// errors.Is(err, ErrInvalidTask) is true for every *ValidationError.
type ValidationError struct {
	Field  string // "method", "params.pageurl", ...
	Reason string // what is wrong and the fix
	// Code is the in.php answer for it (ERROR_PAGEURL,
	// ERROR_TOO_BIG_CAPTCHA_FILESIZE, ...) where the rule that refused
	// the task names one; empty: ProtocolCode decides by the field.
	Code string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Reason }

// ProtocolCode is the in.php error code a service of the protocol
// answers for this refusal: the rule's own Code, else the field's
// (ERROR_GOOGLEKEY, ERROR_PAGEURL, ERROR_BAD_PROXY,
// ERROR_IMAGE_TYPE_NOT_SUPPORTED for an image that cannot be read), else
// ERROR_BAD_PARAMETERS.
func (e *ValidationError) ProtocolCode() string {
	if e.Code != "" {
		return e.Code
	}
	switch strings.TrimPrefix(e.Field, "params.") {
	case "googlekey":
		return "ERROR_GOOGLEKEY"
	case "pageurl":
		return "ERROR_PAGEURL"
	case "proxy":
		return "ERROR_BAD_PROXY"
	case "body", "file":
		return "ERROR_IMAGE_TYPE_NOT_SUPPORTED"
	}
	return "ERROR_BAD_PARAMETERS"
}

// The in.php codes of an image's size.
const (
	codeZeroFileSize   = "ERROR_ZERO_CAPTCHA_FILESIZE"
	codeTooBigFileSize = "ERROR_TOO_BIG_CAPTCHA_FILESIZE"
)

// Is makes every ValidationError match ErrInvalidTask and ErrClassTask.
func (e *ValidationError) Is(target error) bool {
	return target == ErrInvalidTask || target == ErrClassTask
}

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

// Validate checks t against the method-spec table for CaptchaAI: a known,
// supported method, every required field present, and each value well formed. It
// makes no request. Errors are a *ValidationError (errors.Is
// ErrInvalidTask) or an *Error matching ErrUnsupportedType.
func (t Task) Validate() error { return t.ValidateFor(CaptchaAIMethods) }

// Checked is a task that passed validation (Task.Check). What the check
// found travels with it: its kind and, for a "post" task, its decoded
// image, so it is not validated, nor its image decoded, again on its way
// to the provider (Client.SubmitChecked).
type Checked struct {
	Task
	Kind  Kind
	route string // Task.RouteMethod
	file  []byte // the decoded image of a "post" task
}

// Check validates t as ValidateFor does and returns it checked, with
// Params of its own: a change to t's map after Check does not reach it.
func (t Task) Check(supported []string) (Checked, error) {
	k, image, err := t.validate(supported)
	if err != nil {
		return Checked{}, err
	}
	c := Checked{Task: Task{Method: t.Method, Params: maps.Clone(t.Params)}, Kind: k, route: t.RouteMethod()}
	if t.Method == "post" {
		c.file = image // decoded once, by the check
	}
	return c, nil
}

// Unchecked carries t as a Checked that says it was not checked: a
// Client's SubmitChecked validates it as Submit does.
func Unchecked(t Task) Checked { return Checked{Task: t} }

// CheckedFor reports whether c was checked and its method is one of
// supported: then it needs no validation for a provider that solves
// them.
func (c Checked) CheckedFor(supported []string) bool {
	return c.route != "" && slices.Contains(supported, c.route)
}

// ValidateFor is Validate for a provider that solves the given methods
// (names as RouteMethod gives them).
func (t Task) ValidateFor(supported []string) error {
	_, _, err := t.validate(supported)
	return err
}

// validate is the one body of ValidateFor and Check: it returns t's kind
// and, for an image task, its image decoded.
func (t Task) validate(supported []string) (Kind, []byte, error) {
	checks.Count(checks.Provider, t.Params)
	k, err := t.KindFor(supported)
	if err != nil {
		return "", nil, err
	}
	if err := checkReserved(t); err != nil {
		return "", nil, err
	}
	spec := specs[k]
	for _, f := range spec.required {
		v, ok := param(t.Params, f.name)
		if !ok || strings.TrimSpace(v) == "" {
			return "", nil, &ValidationError{Field: "params." + f.name, Reason: "required for " + string(k) + "; " + f.hint}
		}
	}
	for _, f := range append(slices.Clip(spec.required), spec.optional...) {
		v, ok := param(t.Params, f.name)
		if !ok || f.check == nil {
			continue
		}
		if strings.TrimSpace(v) == "" {
			continue // required ones are non-empty by now; empty optional ones are not sent
		}
		if reason := f.check(v); reason != "" {
			return "", nil, &ValidationError{Field: "params." + f.name, Reason: reason}
		}
	}
	// Proxy fields on kinds that take none are not rejected: some services
	// accept them everywhere. But a proxytype needs a proxy.
	if t.Params["proxytype"] != "" && strings.TrimSpace(t.Params["proxy"]) == "" {
		return "", nil, &ValidationError{Field: "params.proxy", Reason: "required when proxytype is set; " + fProxy.hint}
	}
	var image []byte
	if k == KindImage || k == KindGrid {
		if image, err = validateImage(t); err != nil {
			return "", nil, err
		}
	}
	if spec.extra != nil {
		if err := spec.extra(t); err != nil {
			return "", nil, err
		}
	}
	return k, image, nil
}

// param is the value of the param named name in any letter case, as a
// provider reads it (checkReserved refuses two spellings of one name).
func param(p map[string]string, name string) (string, bool) {
	if v, ok := p[name]; ok {
		return v, true
	}
	for k, v := range p {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

// validateImage checks the image of a base64 or post task and returns it
// decoded.
func validateImage(t Task) ([]byte, error) {
	field := ""
	switch t.Method {
	case "base64":
		field = "body"
	case "post":
		field = "file"
	default:
		return nil, nil
	}
	v := t.Params[field]
	if strings.TrimSpace(v) == "" {
		if field == "body" {
			return nil, &ValidationError{Field: "params.body", Reason: "required for method base64; the image encoded as base64", Code: codeZeroFileSize}
		}
		return nil, &ValidationError{Field: "params.file", Reason: "required for method post; the image's bytes, base64-encoded (the command line reads a local path at intake)", Code: codeZeroFileSize}
	}
	if n := base64Size(v); n > MaxImageBytes {
		// Refused from its length: decoding megabytes only to learn
		// they are too many would cost what the refusal saves.
		return nil, checkImageSize("params."+field, n)
	}
	checks.Count(checks.Decode, t.Params)
	b, err := decodeBase64(v)
	switch {
	case err != nil && field == "body":
		return nil, &ValidationError{Field: "params.body", Reason: "not valid base64 (" + err.Error() + "); send the image bytes base64-encoded"}
	case err != nil:
		// The value is never opened as a path: a task may come from a
		// remote client, and what exists on this machine is not theirs
		// to learn.
		return nil, &ValidationError{Field: "params.file", Reason: "must be the image's bytes, base64-encoded; a path is not read here (send method base64 with body, or let the command line read a local file at intake)"}
	}
	return b, checkImageSize("params."+field, len(b))
}

// MaxImageBytes is the largest image taken, the provider's own limit: its
// in.php answers ERROR_TOO_BIG_CAPTCHA_FILESIZE above 600 kB, and a bigger
// upload is cut short, which the provider may read as a bad request.
const MaxImageBytes = 600 << 10

func checkImageSize(field string, n int) error {
	if n == 0 {
		return &ValidationError{Field: field, Reason: "decodes to an empty image", Code: codeZeroFileSize}
	}
	if n > MaxImageBytes {
		return &ValidationError{Field: field, Reason: fmt.Sprintf("the image is %d bytes; the provider takes at most %d (600 KiB): scale it down or crop it", n, MaxImageBytes), Code: codeTooBigFileSize}
	}
	return nil
}

// ReservedParams are the names in.php reads as the request's own, not the
// task's: a param a provider would read as one of these names would
// override the key, the method or where answers go. A provider reads names
// in any letter case, and one that parses forms as PHP does reads more
// spellings as one name (FoldParamName): each is refused. action, id and
// ids are res.php's and pass: tasks use action (reCAPTCHA v3, Turnstile).
var ReservedParams = []string{"key", "method", "json", "soft_id", "pingback", "header_acao"}

// FoldParamName is the name a provider may read a form field name as: in
// lower case, cut at a NUL byte (C code stops there), without the spaces
// around it, and with the rest folded as PHP registers a request variable:
// ' ' and '.' read as '_', and a '[' with a ']' after it starts an array
// index (the name is the text before it, the index is kept as given),
// while a '[' with none reads as '_' and ends the folding. "Soft.ID",
// " soft_id", "soft id\x00x" and "soft_id[]" all name soft_id.
func FoldParamName(name string) string {
	if i := strings.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	name = strings.ToLower(strings.TrimSpace(name))
	b := []byte(name)
	for i, c := range b {
		switch c {
		case ' ', '.':
			b[i] = '_'
		case '[':
			if !strings.Contains(name[i+1:], "]") {
				b[i] = '_'
			}
			return string(b)
		}
	}
	return string(b)
}

// foldedBase is the variable a folded name sets: the text before an array
// index.
func foldedBase(folded string) string {
	if i := strings.IndexByte(folded, '['); i >= 0 {
		return folded[:i]
	}
	return folded
}

// IsReservedParam reports whether a provider may read a param named name
// as one of ReservedParams (FoldParamName), and which.
func IsReservedParam(name string) (string, bool) {
	base := foldedBase(FoldParamName(name))
	return base, slices.Contains(ReservedParams, base)
}

// paramField is the field name of a param in a ValidationError, quoted
// when it holds a byte that would not print (a NUL, a line break).
func paramField(name string) string {
	for _, r := range name {
		if !strconv.IsPrint(r) {
			return "params." + strconv.Quote(name)
		}
	}
	return "params." + name
}

// checkReserved refuses params a provider may read as a protocol field
// (IsReservedParam), spellings of file and body other than the lower-case
// one (which alone may carry them), and one name given twice in two
// spellings a provider may read as one (it takes one of them, maybe not
// the one checked here): "pageurl" beside "PageURL" or "page.url" beside
// "page_url", and a name beside an array of that name ("data" and
// "data[blob]").
func checkReserved(t Task) error {
	seen := make(map[string]string, len(t.Params))
	bases := make(map[string]string, len(t.Params))
	for _, k := range slices.Sorted(maps.Keys(t.Params)) {
		fk := FoldParamName(k)
		if base, ok := IsReservedParam(k); ok {
			how := ""
			if k != base {
				how = fmt.Sprintf(" a provider reads %q as %q:", k, base)
			}
			return &ValidationError{Field: paramField(k), Reason: fmt.Sprintf("%s is the protocol's own field, not a task param;%s reserved in any letter case and in every spelling a form parser reads as one of %s ('.', ' ' or '[' for '_', spaces around, text after a NUL); remove it", strconv.Quote(k), how, strings.Join(ReservedParams, ", "))}
		}
		first, dup := seen[fk]
		if !dup {
			// A plain name and an array of that name set one variable.
			if base := foldedBase(fk); base != fk {
				first, dup = seen[base]
			} else {
				first, dup = bases[fk]
			}
		}
		if dup {
			return &ValidationError{Field: paramField(k), Reason: fmt.Sprintf("%q and %q name one field (a provider reads names in any letter case, '.' and ' ' as '_', without spaces around): give it once", first, k)}
		}
		seen[fk] = k
		if base := foldedBase(fk); base != fk {
			if _, ok := bases[base]; !ok {
				bases[base] = k
			}
		}
		if (fk == "file" || fk == "body") && k != fk {
			return &ValidationError{Field: paramField(k), Reason: fmt.Sprintf("write %q in lower case, with nothing around it: %q", k, fk)}
		}
	}
	return nil
}

// base64Data is s without a data: URI prefix, if it has one.
func base64Data(s string) string {
	if strings.HasPrefix(s, "data:") {
		if i := strings.Index(s, ","); i >= 0 {
			return s[i+1:]
		}
	}
	return s
}

// base64Size is how many bytes s decodes to as decodeBase64 reads it (a
// data: prefix and white space skipped), counted without decoding it.
func base64Size(s string) int {
	s = base64Data(s)
	n := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\n', '\r', ' ', '\t', '=':
		default:
			n++
		}
	}
	return n * 3 / 4
}

// decodeBase64 accepts standard base64 with or without padding, with line
// breaks, and with a data: URI prefix.
func decodeBase64(s string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == ' ' || r == '\t' {
			return -1
		}
		return r
	}, base64Data(s))
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		b, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
	}
	if err != nil {
		return nil, errors.New("bad base64 data")
	}
	return b, nil
}

// CheckCallbackURL is the one checker of a URL called back when a task
// is solved (a pingback sent to the provider, a client's pingback or
// callbackUrl at the service): a page URL's rules (a full http or https
// URL), and no user or password, which would be sent and logged with it.
// It returns why v is refused, or "".
func CheckCallbackURL(v string) string {
	if reason := checkPageURL(v); reason != "" {
		return reason
	}
	if u, err := url.Parse(strings.TrimSpace(v)); err == nil && u.User != nil {
		return "must not carry a user or password (user:pass@); put a secret in the path instead"
	}
	return ""
}

func checkPageURL(v string) string {
	v = strings.TrimSpace(v)
	if v == "" {
		return "empty; the URL of the page that shows the captcha"
	}
	u, err := url.Parse(v)
	if err != nil {
		return fmt.Sprintf("%s is not a URL (%v); use the full address, e.g. https://example.com/login", quoteShort(v), errors.Unwrap(err))
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	case "":
		return fmt.Sprintf("%s has no scheme; add https:// (e.g. https://%s)", quoteShort(v), strings.TrimPrefix(v, "//"))
	default:
		if u.Opaque != "" && !strings.Contains(v, "://") {
			// "example.com:8080/x" parses with scheme "example.com".
			return fmt.Sprintf("%s has no scheme; add https:// (e.g. https://%s)", quoteShort(v), v)
		}
		return fmt.Sprintf("%s must be an http or https URL", quoteShort(v))
	}
	if u.Host == "" {
		return fmt.Sprintf("%s has no host; use the full address, e.g. https://example.com/login", quoteShort(v))
	}
	return ""
}

func checkProxy(v string) string {
	if _, err := ParseProxy(v, ""); err != nil {
		return err.(*ValidationError).Reason
	}
	return ""
}

func checkProxyType(v string) string {
	switch strings.ToUpper(strings.TrimSpace(v)) {
	case "HTTP", "HTTPS", "SOCKS4", "SOCKS5":
		return ""
	}
	return fmt.Sprintf("%s is not a proxy type; use one of HTTP, HTTPS, SOCKS4, SOCKS5", quoteShort(v))
}

func checkHost(v string) string {
	v = strings.TrimSpace(v)
	if v == "" || strings.ContainsAny(v, " /?#") && !strings.Contains(v, "://") {
		return fmt.Sprintf("%s is not a host name; give the API server's host, e.g. api.example.com", quoteShort(v))
	}
	return ""
}

func checkRecaptchaDomain(v string) string {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "google.com", "recaptcha.net":
		return ""
	}
	return fmt.Sprintf("%s is not a domain reCAPTCHA loads from; use google.com or recaptcha.net (createTask's apiDomain)", quoteShort(v))
}

// checkHTMLPage checks a challenge page's HTML, base64-encoded
// (createTask's htmlPageBase64).
func checkHTMLPage(v string) string {
	if _, err := decodeBase64(v); err != nil {
		return "not valid base64; send the challenge page's HTML base64-encoded (createTask's htmlPageBase64)"
	}
	return ""
}

// gridInstructions: a grid says what to select, in words or as an image.
func gridInstructions(t Task) error {
	if strings.TrimSpace(t.Params["textinstructions"]) == "" && strings.TrimSpace(t.Params["imginstructions"]) == "" {
		return &ValidationError{Field: "params.textinstructions", Reason: "required for " + string(KindGrid) + "; " + fTextInstr.hint}
	}
	return nil
}

func checkFlag(v string) string {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "0", "1", "true", "false":
		return ""
	}
	return fmt.Sprintf("%s is not 0 or 1", quoteShort(v))
}

func checkScore(v string) string {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f <= 0 || f > 1 {
		return fmt.Sprintf("%s is not a score between 0.1 and 0.9 (0.3 is realistic)", quoteShort(v))
	}
	return ""
}

func checkBLSImage(v string) string {
	if strings.TrimSpace(v) == "" {
		return ""
	}
	if n := base64Size(v); n > MaxImageBytes {
		return fmt.Sprintf("the image is %d bytes; the provider takes at most %d (600 KiB)", n, MaxImageBytes)
	}
	b, err := decodeBase64(v)
	if err != nil {
		return "not valid base64; send each grid image as base64 or a data: URI"
	}
	if len(b) > MaxImageBytes {
		return fmt.Sprintf("the image is %d bytes; the provider takes at most %d (600 KiB)", len(b), MaxImageBytes)
	}
	return ""
}

func isTrue(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true":
		return true
	}
	return false
}
