package createtask

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
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
		{wire: "websiteKey", param: "sitekey"},
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
		{wire: "websiteKey", param: "sitekey"},
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

// ParseTask reads a createTask task object (the "task" field's JSON) into
// the queue's task: the in.php method and its params, ready for the same
// validation as a task from in.php. The Fault names the field and the fix:
// ERROR_TASK_ABSENT (no task), ERROR_TASK_NOT_SUPPORTED (no or unknown
// type) or ERROR_BAD_PARAMETERS (a field of the wrong shape).
func ParseTask(raw []byte) (provider.Task, *Fault) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return provider.Task{}, fault("ERROR_TASK_ABSENT", "task: required; send {\"task\":{\"type\":\"TurnstileTaskProxyless\",\"websiteURL\":…,\"websiteKey\":…}}")
	}
	obj, f := foldObject(raw, "task")
	if f != nil {
		return provider.Task{}, f
	}
	if f := reservedField(obj); f != nil {
		return provider.Task{}, f
	}
	typ, ok := obj.str("type")
	if !ok || strings.TrimSpace(typ) == "" {
		return provider.Task{}, fault("ERROR_TASK_NOT_SUPPORTED", "task.type: required, a string; one of "+strings.Join(TypeNames(), ", "))
	}
	tn, ok := byName[strings.ToLower(strings.TrimSpace(typ))]
	if !ok {
		return provider.Task{}, fault("ERROR_TASK_NOT_SUPPORTED", fmt.Sprintf("task.type: %s is not a type captchaq solves; use one of %s", quote(typ), strings.Join(TypeNames(), ", ")))
	}
	tt := tn.t
	if tn.t == typeGeeTest {
		switch v, _ := obj.text("version"); v {
		case "", "3":
		case "4":
			tt = typeGeeTestV4
		default:
			return provider.Task{}, fault("ERROR_BAD_PARAMETERS", fmt.Sprintf("task.version: %s is not a GeeTest version; use 3 or 4", quote(v)))
		}
	}
	if tn.t == typeTurnstile {
		switch v, _ := obj.str("cloudflareTaskType"); strings.ToLower(strings.TrimSpace(v)) {
		case "", "token":
		case "cf_clearance":
			tt = typeCFClearance
		default:
			return provider.Task{}, fault("ERROR_TASK_NOT_SUPPORTED", fmt.Sprintf("task.cloudflareTaskType: %s is not supported; use \"token\" (a Turnstile token) or \"cf_clearance\" (a challenge page's cookie)", quote(v)))
		}
	}
	t := provider.Task{Method: tt.method, Params: map[string]string{}}
	maps.Copy(t.Params, tn.extra)
	for _, fd := range tt.fields {
		name, v, ok := obj.field(fd)
		if !ok {
			continue
		}
		s, f := convert(name, v, fd.kind)
		if f != nil {
			return provider.Task{}, f
		}
		if strings.TrimSpace(s) != "" { // an empty optional field is not sent, as in.php's
			t.Params[fd.param] = s
		}
	}
	if tt == typeGeeTestV4 {
		id, f := geeTestV4ID(obj)
		if f != nil {
			return provider.Task{}, f
		}
		t.Params["captcha_id"] = id
	}
	if tt == typeRecaptchaV2 {
		if f := enterprisePayload(obj, tn, t.Params); f != nil {
			return provider.Task{}, f
		}
	}
	if f := parseProxy(obj, tn, t.Params); f != nil {
		return provider.Task{}, f
	}
	if f := checkNeeds(tt, tn, t.Params); f != nil {
		return provider.Task{}, f
	}
	return t, nil
}

// reservedField refuses a task field in.php would read as the request's
// own (provider.IsReservedParam: key, pingback, soft_id, … in any spelling
// a form parser reads as one): no type takes one, and a client that sends
// one means it to act, which it would not.
func reservedField(obj folded) *Fault {
	for _, lk := range slices.Sorted(maps.Keys(obj)) {
		name := obj[lk].name
		if base, ok := provider.IsReservedParam(name); ok {
			if strings.ContainsFunc(name, func(r rune) bool { return !strconv.IsPrint(r) }) {
				name = strconv.Quote(name)
			}
			return fault("ERROR_BAD_PARAMETERS", fmt.Sprintf("task.%s: read as in.php's own field %s, not a task field (reserved in any letter case and every spelling a form parser reads as one); remove it", name, base))
		}
	}
	return nil
}

// geeTestV4ID is a GeeTest v4 task's captcha_id: initParameters.captcha_id
// (2captcha, CapMonster), else gt.
func geeTestV4ID(obj folded) (string, *Fault) {
	if _, raw, ok := obj.get("initParameters"); ok {
		init, f := foldObject(raw, "task.initParameters")
		if f != nil {
			return "", f
		}
		if id, _ := init.str("captcha_id"); strings.TrimSpace(id) != "" {
			return id, nil
		}
	}
	if gt, _ := obj.str("gt"); strings.TrimSpace(gt) != "" {
		return gt, nil
	}
	return "", fault("ERROR_BAD_PARAMETERS", "task.initParameters.captcha_id: required for GeeTest version 4 (the captcha_id from the page)")
}

// parseProxy reads the proxy fields into in.php's proxy and proxytype.
func parseProxy(obj folded, tn typeName, params map[string]string) *Fault {
	var given []string
	for _, f := range proxyFields {
		if name, _, ok := obj.get(f); ok {
			given = append(given, name)
		}
	}
	if len(given) == 0 {
		return nil
	}
	if !tn.proxy {
		fix := "remove the proxy fields"
		for _, n := range names {
			if n.t == tn.t && n.proxy {
				fix = "use " + n.name + " to send a proxy, or remove the proxy fields"
				break
			}
		}
		return fault("ERROR_BAD_PARAMETERS", fmt.Sprintf("task.%s: %s takes no proxy; %s", given[0], tn.name, fix))
	}
	var vals [5]string
	for i, f := range proxyFields {
		name, v, ok := obj.get(f)
		if !ok {
			continue
		}
		s, fl := convert(name, v, vString)
		if fl != nil && f == "proxyPassword" {
			return fault("ERROR_BAD_PARAMETERS", "task."+name+": must be a string") // never shown
		}
		if fl != nil {
			return fl
		}
		vals[i] = strings.TrimSpace(s)
	}
	return proxyParams(vals, params)
}

// proxyParams writes createTask's proxy fields (in proxyFields' order)
// as in.php's proxy and proxytype.
func proxyParams(vals [5]string, params map[string]string) *Fault {
	if vals[0] == "" {
		return fault("ERROR_BAD_PROXY", "task.proxyType: required with a proxy: http, https, socks4 or socks5")
	}
	p, err := provider.NewProxy(vals[0], vals[1], vals[2], vals[3], vals[4], func(f string) string { return "task." + f })
	if err != nil {
		return fault("ERROR_BAD_PROXY", err.Error())
	}
	params["proxy"], params["proxytype"] = p.InPHP()
	return nil
}

// convert reads one field's JSON value as in.php text.
func convert(name string, v json.RawMessage, kind valueKind) (string, *Fault) {
	v = bytes.TrimSpace(v)
	if string(v) == "null" {
		return "", nil
	}
	bad := func(want string) (string, *Fault) {
		return "", fault("ERROR_BAD_PARAMETERS", fmt.Sprintf("task.%s: must be %s, got %s", name, want, short(v)))
	}
	switch kind {
	case vFlag:
		switch strings.ToLower(strings.Trim(string(v), `"`)) {
		case "true", "1":
			return "1", nil
		case "false", "0", "":
			return "", nil
		}
		return bad("true or false")
	case vNumber:
		s := string(v)
		if len(v) > 0 && v[0] == '"' {
			if json.Unmarshal(v, &s) != nil {
				return bad("a number")
			}
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return bad("a number")
		}
		if f == 0 {
			return "", nil
		}
		return strconv.FormatFloat(f, 'f', -1, 64), nil
	}
	if len(v) > 0 && v[0] == '"' {
		var s string
		if json.Unmarshal(v, &s) != nil {
			return bad("a string")
		}
		return s, nil
	}
	if _, err := strconv.ParseFloat(string(v), 64); err == nil {
		return string(v), nil
	}
	return bad("a string")
}

// folded is a JSON object read with its names folded to lower case.
type folded map[string]foldedValue

type foldedValue struct {
	name string // as given
	raw  json.RawMessage
}

// foldObject reads a JSON object; a name given twice in two letter cases
// is refused (which one a service reads is anyone's guess).
func foldObject(raw []byte, what string) (folded, *Fault) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, fault("ERROR_BAD_PARAMETERS", fmt.Sprintf("%s: must be a JSON object, got %s", what, short(raw)))
	}
	out := make(folded, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		lk := strings.ToLower(k)
		if prev, dup := out[lk]; dup {
			return nil, fault("ERROR_BAD_PARAMETERS", fmt.Sprintf("%s.%s: %q and %q name one field (names are read in any letter case): give it once", what, k, prev.name, k))
		}
		out[lk] = foldedValue{name: k, raw: m[k]}
	}
	return out, nil
}

func (o folded) get(name string) (string, json.RawMessage, bool) {
	v, ok := o[strings.ToLower(name)]
	return v.name, v.raw, ok
}

// field finds fd under its name or an alias.
func (o folded) field(fd field) (string, json.RawMessage, bool) {
	if n, v, ok := o.get(fd.wire); ok {
		return n, v, true
	}
	for _, a := range fd.alias {
		if n, v, ok := o.get(a); ok {
			return n, v, true
		}
	}
	return "", nil, false
}

// str is a string field's value.
func (o folded) str(name string) (string, bool) {
	_, v, ok := o.get(name)
	if !ok {
		return "", false
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// text is a string or number field's text.
func (o folded) text(name string) (string, bool) {
	n, v, ok := o.get(name)
	if !ok {
		return "", false
	}
	s, f := convert(n, v, vString)
	return strings.TrimSpace(s), f == nil
}

// TaskObject is the createTask task object for the queue's task t, as a
// createTask provider is sent it: the family's Proxyless name, or its
// proxy name when t has a proxy, and each param under its createTask
// name. A method no createTask type carries (see Methods) is refused with
// provider.ErrUnsupportedType.
func TaskObject(t provider.Task) (map[string]any, error) {
	k, err := t.KindFor(provider.KnownMethods)
	if err != nil {
		return nil, err
	}
	var tt *taskType
	for _, c := range families {
		if c.kind == k {
			tt = c
		}
	}
	if tt == nil {
		return nil, &provider.Error{Op: "submit", Code: provider.CodeUnsupportedType, Class: provider.ClassTask,
			Text: fmt.Sprintf("%s tasks have no createTask type; route them to an in.php provider (createTask providers solve %s)", k, strings.Join(Carried, ", "))}
	}
	params := foldParams(t.Params)
	if t.Method == "post" {
		params["body"] = params["file"]
	}
	if err := sendNeeds(tt, k, params); err != nil {
		return nil, err
	}
	proxy := strings.TrimSpace(params["proxy"]) != ""
	name := pickName(tt, proxy, params)
	obj := map[string]any{"type": name}
	for _, fd := range tt.fields {
		v, ok := params[strings.ToLower(fd.param)]
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		switch fd.kind {
		case vFlag:
			if isTrue(v) {
				obj[fd.wire] = true
			}
		case vNumber:
			if _, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
				return nil, &provider.ValidationError{Field: "params." + fd.param, Reason: fmt.Sprintf("%s is not a number", quote(v))}
			}
			obj[fd.wire] = json.Number(strings.TrimSpace(v))
		default:
			obj[fd.wire] = v
		}
	}
	switch tt {
	case typeGeeTestV4:
		obj["version"] = 4
		obj["initParameters"] = map[string]string{"captcha_id": params["captcha_id"]}
	case typeGeeTest:
		obj["version"] = 3
	case typeCFClearance:
		obj["type"] = "TurnstileTask"
		obj["cloudflareTaskType"] = "cf_clearance"
	case typeRecaptchaV2:
		if s, ok := obj["recaptchaDataSValue"]; ok && isTrue(params["enterprise"]) {
			delete(obj, "recaptchaDataSValue")
			obj["enterprisePayload"] = map[string]any{"s": s}
		}
	}
	if proxy {
		if err := proxyObject(params["proxy"], params["proxytype"], obj); err != nil {
			return nil, err
		}
	}
	return obj, nil
}

// pickName is the name a createTask provider is sent for a task of tt.
func pickName(tt *taskType, proxy bool, params map[string]string) string {
	best := ""
	bestExtra := -1
	for _, n := range names {
		if n.aliasOnly || n.t != tt && !(tt == typeGeeTestV4 && n.t == typeGeeTest) {
			continue
		}
		if n.proxy != (proxy && tt.proxy) {
			continue
		}
		match := true
		for k, v := range n.extra {
			if !strings.EqualFold(params[k], v) && !(v == "1" && isTrue(params[k])) {
				match = false
			}
		}
		if match && len(n.extra) > bestExtra {
			best, bestExtra = n.name, len(n.extra)
		}
	}
	return best
}

// proxyObject writes in.php's proxy (login:password@host:port) and
// proxytype as the proxy fields.
func proxyObject(proxy, typ string, obj map[string]any) error {
	p, err := provider.ParseProxy(proxy, typ)
	if err != nil {
		return err
	}
	obj["proxyType"] = strings.ToLower(p.Type)
	obj["proxyAddress"] = p.Host
	obj["proxyPort"] = p.Port
	if p.Login != "" {
		obj["proxyLogin"] = p.Login
		obj["proxyPassword"] = p.Password
	}
	return nil
}

// foldParams is params by lower-cased name.
func foldParams(p map[string]string) map[string]string {
	out := make(map[string]string, len(p))
	for k, v := range p {
		out[strings.ToLower(k)] = v
	}
	return out
}

// Solution is the solution object of an answer of kind k, as the
// services return it: ImageToTextTask {text}; reCAPTCHA
// {gRecaptchaResponse, token}; Turnstile {token, userAgent}; hCaptcha
// {gRecaptchaResponse, token, userAgent}; FunCaptcha {token}; GeeTest v3
// {challenge, validate, seccode}; GeeTest v4 the answer's fields
// (captcha_id, lot_number, pass_token, gen_time, captcha_output); Amazon
// WAF {captcha_voucher, existing_token}; MTCaptcha {token}; DataDome
// {cookie, userAgent}. token
// and raw are the answer (provider.Answer's Token and, for structured
// answers or a token with its bindings, its JSON); params are the task's.
// Cloudflare Challenge {cf_clearance}; grid {click}; Lemin {answer,
// challenge_id}; CaptchaFox, Friendly Captcha, MTCaptcha {token}; Amazon
// WAF {captcha_voucher, existing_token}; DataDome {cookie}. What the
// answer binds the token to (BindingsFor: its user agent under any
// spelling, cookies, proxy; else the task's user agent for the kinds
// solved with it) is added as userAgent, cookies and proxy to every kind's
// solution: a made-up one would be a token the site refuses. Any other kind (a task taken by
// in.php) answers {token}, with a structured answer's fields beside it.
func Solution(k provider.Kind, token string, raw json.RawMessage, params map[string]string) map[string]any {
	var out map[string]any
	switch k {
	case provider.KindImage:
		out = map[string]any{"text": token}
	case provider.KindRecaptchaV2, provider.KindRecaptchaV3:
		out = map[string]any{"gRecaptchaResponse": token, "token": token}
	case provider.KindHCaptcha:
		out = map[string]any{"gRecaptchaResponse": token, "token": token}
	case provider.KindTurnstile, provider.KindFunCaptcha, provider.KindCaptchaFox, provider.KindFriendlyCaptcha, provider.KindMTCaptcha:
		out = map[string]any{"token": token}
	case provider.KindDataDome:
		out = map[string]any{"cookie": token}
	case provider.KindCloudflareChallenge:
		out = map[string]any{"cf_clearance": cmp.Or(objectString(raw, "cf_clearance"), token)}
	case provider.KindGrid:
		out = map[string]any{"text": token}
		if c, ok := clicks(token); ok {
			out = map[string]any{"click": c}
		}
	case provider.KindGeeTest:
		doc := geeTestDoc(raw, token)
		out = map[string]any{"challenge": doc["geetest_challenge"], "validate": doc["geetest_validate"], "seccode": doc["geetest_seccode"]}
	default:
		out = map[string]any{}
		var doc map[string]any
		if len(raw) > 0 && json.Unmarshal(raw, &doc) == nil {
			if _, env := doc["request"]; env {
				// a res.php answer: its request is the token
				delete(doc, "request")
				delete(doc, "status")
			}
			maps.Copy(out, doc)
		}
		if !fieldsOnly(k) || len(out) == 0 {
			out["token"] = token
		}
	}
	BindingsFor(k, raw, params).AddTo(out, "userAgent")
	return out
}

// fieldsOnly reports whether a kind's answer is a JSON object whose
// fields are the solution (GeeTest v4, Lemin, Amazon WAF), with no token
// beside them.
func fieldsOnly(k provider.Kind) bool {
	return k == provider.KindGeeTestV4 || k == provider.KindLemin || k == provider.KindAmazonWAF
}

// BindingsFor is what an answer of kind k binds its token to: the
// answer's bindings (provider.BindingsOf), and for a Turnstile, hCaptcha,
// Cloudflare Challenge, CaptchaFox or DataDome answered without a user
// agent the task's userAgent (params), which it was solved with; none
// without either. A DataDome cookie is the answer itself, not a binding.
func BindingsFor(k provider.Kind, raw json.RawMessage, params map[string]string) provider.Bindings {
	b := provider.BindingsOf(raw)
	if k == provider.KindDataDome {
		b.Cookies = nil
	}
	if b.UserAgent == "" && SolvedWithTaskUserAgent(k) {
		b.UserAgent = strings.TrimSpace(foldParams(params)["useragent"])
	}
	return b
}

// SolvedWithTaskUserAgent reports whether a task of kind k is solved in a
// browser of the task's userAgent when it names one (Turnstile, hCaptcha,
// Cloudflare Challenge, CaptchaFox, DataDome): its token is bound to it.
func SolvedWithTaskUserAgent(k provider.Kind) bool {
	switch k {
	case provider.KindTurnstile, provider.KindHCaptcha, provider.KindCloudflareChallenge, provider.KindCaptchaFox, provider.KindDataDome:
		return true
	}
	return false
}

// geeTestDoc reads a GeeTest v3 answer: {"geetest_challenge", …}, from
// the structured answer or the token's text.
func geeTestDoc(raw json.RawMessage, token string) map[string]string {
	doc := map[string]string{}
	if len(raw) == 0 {
		raw = json.RawMessage(token)
	}
	var m map[string]any
	if json.Unmarshal(raw, &m) == nil {
		for k, v := range m {
			if s, ok := v.(string); ok {
				doc[k] = s
			}
		}
	}
	return doc
}

// objectString is a string field of a JSON object, "" when absent.
func objectString(raw json.RawMessage, name string) string {
	if len(raw) == 0 {
		return ""
	}
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return ""
	}
	s, _ := m[name].(string)
	return s
}

// AnswerOf reads a solution object of a task of kind k back into the
// queue's answer, the same an in.php service gives for that kind: the
// text or token; GeeTest v3 as {"geetest_challenge","geetest_validate",
// "geetest_seccode"}; GeeTest v4 and Amazon WAF as their fields; a
// DataDome cookie as its text. ok is false when the solution has no
// answer for k.
func AnswerOf(k provider.Kind, solution json.RawMessage) (provider.Answer, bool) {
	obj, f := foldObject(solution, "solution")
	if f != nil {
		return provider.Answer{}, false
	}
	text := func(names ...string) (provider.Answer, bool) {
		for _, n := range names {
			if s, ok := obj.str(n); ok && s != "" {
				return bound(s, solution), true
			}
		}
		return provider.Answer{}, false
	}
	structured := func(v any) (provider.Answer, bool) {
		b, err := json.Marshal(v)
		if err != nil {
			return provider.Answer{}, false
		}
		return provider.Answer{Raw: string(b), Token: string(b), JSON: json.RawMessage(b)}, true
	}
	switch k {
	case provider.KindImage:
		return text("text")
	case provider.KindRecaptchaV2, provider.KindRecaptchaV3, provider.KindHCaptcha:
		return text("gRecaptchaResponse", "token")
	case provider.KindGeeTest:
		c, _ := obj.str("challenge")
		v, _ := obj.str("validate")
		s, _ := obj.str("seccode")
		if c == "" || v == "" || s == "" {
			return provider.Answer{}, false
		}
		return structured(map[string]string{"geetest_challenge": c, "geetest_validate": v, "geetest_seccode": s})
	case provider.KindDataDome:
		return text("cookie")
	case provider.KindGeeTestV4, provider.KindAmazonWAF:
		var m map[string]any
		if json.Unmarshal(solution, &m) != nil || len(m) == 0 {
			return provider.Answer{}, false
		}
		return structured(m)
	case provider.KindLemin:
		a, _ := obj.str("answer")
		id, _ := obj.str("challenge_id")
		if a == "" || id == "" {
			return provider.Answer{}, false
		}
		return structured(map[string]string{"answer": a, "challenge_id": id})
	case provider.KindGrid:
		var g struct{ Click []int }
		if json.Unmarshal(solution, &g) == nil && len(g.Click) > 0 {
			s := clickAnswer(g.Click)
			return provider.Answer{Raw: s, Token: s}, true
		}
	case provider.KindCloudflareChallenge:
		// The cookie is the token; the solution, with what binds it, the
		// answer, as an in.php service's JSON answer is.
		cf, _ := obj.str("cf_clearance")
		var buf bytes.Buffer
		if cf == "" || json.Compact(&buf, solution) != nil {
			return provider.Answer{}, false
		}
		return provider.Answer{Raw: buf.String(), Token: cf, JSON: json.RawMessage(buf.String())}, true
	}
	return text("token", "text", "gRecaptchaResponse")
}

// bound is the answer token of a solution: the solution itself is kept as
// the answer's JSON when it binds the token to something (a user agent,
// cookies, a proxy), so those reach the client with the token.
func bound(token string, solution json.RawMessage) provider.Answer {
	a := provider.Answer{Raw: token, Token: token}
	var buf bytes.Buffer
	if !provider.BindingsOf(solution).Empty() && json.Compact(&buf, solution) == nil {
		a.Raw = buf.String()
		a.JSON = json.RawMessage(a.Raw)
	}
	return a
}

func isTrue(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true":
		return true
	}
	return false
}

func quote(s string) string {
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return strconv.Quote(s)
}

func short(raw []byte) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return s
}
