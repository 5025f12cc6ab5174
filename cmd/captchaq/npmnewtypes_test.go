package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// newTypesUA is the user agent compat/node/newtypes.js solves the bound
// types with: the answers must bring back exactly it.
const newTypesUA = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) ClientBrowser/3.1"

// ntWant is what one call of newtypes.js answers: the answer object's
// keys, exactly (the client's own envelope included), which of them holds
// the bound user agent, and the check of its main value.
type ntWant struct {
	keys  []string
	ua    string
	value func(map[string]any) bool
}

var (
	gridClicks  = regexp.MustCompile(`^click:\d(/\d)*$`)
	mtToken     = regexp.MustCompile(`^v1\(`)
	ddCookie    = regexp.MustCompile(`^datadome=[\w~-]{100,};`)
	tokenAnswer = regexp.MustCompile(`^[\w.-]{100,}$`)
)

// field checks m[k] (a string) against re.
func field(k string, re *regexp.Regexp) func(map[string]any) bool {
	return func(m map[string]any) bool { s, _ := m[k].(string); return re.MatchString(s) }
}

// object checks that m[k] is an object of exactly keys, each a string
// that is not empty.
func object(k string, keys ...string) func(map[string]any) bool {
	return func(m map[string]any) bool {
		o, _ := m[k].(map[string]any)
		for _, f := range keys {
			if s, _ := o[f].(string); s == "" {
				return false
			}
		}
		return len(o) == len(keys)
	}
}

// newTypeCases are the calls of newtypes.js and their answers: through
// res.php json=1 ({status, data} as the 2captcha client returns it) and
// getTaskResult's solution. A type solved without a user agent comes
// back with none.
var newTypeCases = map[string]ntWant{
	"2captcha/amazon_waf":           {keys: []string{"status", "data"}, value: object("data", "captcha_voucher", "existing_token")},
	"2captcha/mtcaptcha":            {keys: []string{"status", "data"}, value: field("data", mtToken)},
	"2captcha/datadome":             {keys: []string{"status", "data", "useragent"}, ua: "useragent", value: field("data", ddCookie)},
	"2captcha/recaptcha_enterprise": {keys: []string{"status", "data"}, value: field("data", recaptchaAnswer)},
	"2captcha/grid":                 {keys: []string{"status", "data"}, value: field("data", gridClicks)},
	"2captcha/lemin":                {keys: []string{"status", "data"}, value: object("data", "answer", "challenge_id")},
	"2captcha/captchafox":           {keys: []string{"status", "data", "useragent"}, ua: "useragent", value: field("data", tokenAnswer)},
	"2captcha/friendly":             {keys: []string{"status", "data"}, value: field("data", tokenAnswer)},

	"capmonster/amazon_waf":           {keys: []string{"captcha_voucher", "existing_token"}, value: field("captcha_voucher", tokenAnswer)},
	"capmonster/mtcaptcha":            {keys: []string{"token"}, value: field("token", mtToken)},
	"capmonster/recaptcha_enterprise": {keys: []string{"gRecaptchaResponse", "token"}, value: field("gRecaptchaResponse", recaptchaAnswer)},
	"capmonster/cf_clearance":         {keys: []string{"cf_clearance", "userAgent"}, ua: "userAgent", value: field("cf_clearance", tokenAnswer)},

	"anticaptcha/amazon_waf":           {keys: []string{"captcha_voucher", "existing_token"}, value: field("existing_token", regexp.MustCompile(`^[\w-]+:[\w-]+$`))},
	"anticaptcha/mtcaptcha":            {keys: []string{"token"}, value: field("token", mtToken)},
	"anticaptcha/datadome":             {keys: []string{"cookie", "userAgent"}, ua: "userAgent", value: field("cookie", ddCookie)},
	"anticaptcha/recaptcha_enterprise": {keys: []string{"gRecaptchaResponse", "token"}, value: field("token", recaptchaAnswer)},
	"anticaptcha/cf_clearance":         {keys: []string{"cf_clearance", "userAgent"}, ua: "userAgent", value: field("cf_clearance", tokenAnswer)},
	"anticaptcha/grid":                 {keys: []string{"click"}, value: func(m map[string]any) bool { c, _ := m["click"].([]any); return len(c) > 0 }},
	"anticaptcha/lemin":                {keys: []string{"answer", "challenge_id"}, value: field("answer", regexp.MustCompile(`^0x[0-9a-f]{64}$`))},
	"anticaptcha/captchafox":           {keys: []string{"token", "userAgent"}, ua: "userAgent", value: field("token", tokenAnswer)},
	"anticaptcha/friendly":             {keys: []string{"token"}, value: field("token", tokenAnswer)},
}

// checkNewType asserts one call's answer against w.
func checkNewType(c ctCase, w ntWant) error {
	var m map[string]any
	if !c.OK || json.Unmarshal(c.Result, &m) != nil {
		return fmt.Errorf("%+v, want an answer", c)
	}
	if got := slices.Sorted(maps.Keys(m)); !slices.Equal(got, slices.Sorted(slices.Values(w.keys))) {
		return fmt.Errorf("answer %s: fields %v, want %v (a binding made up or lost)", c.Result, got, w.keys)
	}
	if w.ua != "" && m[w.ua] != newTypesUA {
		return fmt.Errorf("answer %s: %s %v, want the client's %q", c.Result, w.ua, m[w.ua], newTypesUA)
	}
	if !w.value(m) {
		return fmt.Errorf("answer %s: not the type's answer", c.Result)
	}
	return nil
}

// Each type of the bot-protection walls (Amazon WAF, MTCaptcha,
// DataDome), Cloudflare's cf_clearance, reCAPTCHA Enterprise and the
// createTask families in.php already took (grid, Lemin, CaptchaFox,
// Friendly Captcha) is solved through one `captchaq serve` by the npm
// clients' own methods for it: @2captcha/captcha-solver on in.php,
// CapMonster Cloud's client and anticaptcha on createTask
// (docs/clients.md names the types a client has no method for). A
// binding comes back as the client's own user agent, at both fronts.
func TestNPMClientsNewTypesThroughServe(t *testing.T) {
	t.Parallel()
	node := npmCreateTaskClients(t)
	ss, apiURL, err := sim.Start(sim.Config{Key: "nt-provider-key", LatencyScale: 0.01, PollBan: sim.PollBan{Disabled: true}, NoBulk: true, Methods: provider.KnownMethods}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	methods, _ := json.Marshal(provider.KnownMethods)
	providers := writeFile(t, "providers.json", `[{"name":"sim","url":"`+apiURL+`","key_env":"NT_PROVIDER_KEY","threads":10,"methods":`+string(methods)+`}]`)
	clients := writeFile(t, "clients.json", `[{"name":"nt","key":"nt-client-key"}]`)
	_, m := startProcess(t, captchaqBinary(t), []string{"NT_PROVIDER_KEY=nt-provider-key"}, regexp.MustCompile(`msg=serving addr=(127\.0\.0\.1:\d+)`),
		"serve", "--providers", providers, "--clients", clients, "--store", filepath.Join(t.TempDir(), "serve.db"),
		"--listen", "127.0.0.1:0", "--poll-interval", "50ms")
	cases := runNodeScript(t, node, "newtypes.js", "http://"+m[1], "nt-client-key")
	for _, name := range slices.Sorted(maps.Keys(newTypeCases)) {
		if err := checkNewType(cases[name], newTypeCases[name]); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if extra := len(cases) - len(newTypeCases); extra != 0 {
		t.Errorf("newtypes.js made %d calls, the test checks %d", len(cases), len(newTypeCases))
	}
	if st := ss.Stats(); st.Accepted != int64(len(newTypeCases)) || st.Calls.CreateTask != 0 {
		t.Errorf("at the provider: %d accepted, %d by createTask; want the %d tasks, by in.php", st.Accepted, st.Calls.CreateTask, len(newTypeCases))
	}
}
