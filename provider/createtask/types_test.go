package createtask

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/captchaq/captchaq/provider"
)

const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

// html is a challenge page, base64-encoded.
const html = "PGh0bWw+PC9odG1sPg=="

// parseCases are task objects of every type name with every field each
// takes, and the in.php task each stands for.
var parseCases = []struct {
	name string
	task string
	want provider.Task
}{
	{"image", `{"type":"ImageToTextTask","body":"` + png + `","phrase":true,"case":true,"numeric":1,"math":true,"minLength":4,"maxLength":6,"comment":"red letters"}`,
		provider.Task{Method: "base64", Params: map[string]string{"body": png, "phrase": "1", "regsense": "1", "numeric": "1", "calc": "1", "min_len": "4", "max_len": "6", "textinstructions": "red letters"}}},
	{"image, false flags and zero numbers left out", `{"type":"imagetotexttask","body":"` + png + `","phrase":false,"case":0,"numeric":0,"minLength":"0"}`,
		provider.Task{Method: "base64", Params: map[string]string{"body": png}}},
	{"CapMonster image (Case, math as numbers)", `{"type":"ImageToTextTask","body":"` + png + `","Case":1,"math":"true","CapMonsterModule":"universal"}`,
		provider.Task{Method: "base64", Params: map[string]string{"body": png, "regsense": "1", "calc": "1"}}},
	{"reCAPTCHA v2", `{"type":"RecaptchaV2TaskProxyless","websiteURL":"https://shop.example/signup","websiteKey":"6Le-v2","recaptchaDataSValue":"ds","isInvisible":true,"userAgent":"UA","cookies":"a=b"}`,
		provider.Task{Method: "userrecaptcha", Params: map[string]string{"pageurl": "https://shop.example/signup", "googlekey": "6Le-v2", "data-s": "ds", "invisible": "1", "userAgent": "UA", "cookies": "a=b"}}},
	{"reCAPTCHA v2 with a proxy", `{"type":"RecaptchaV2Task","websiteURL":"https://shop.example/","websiteKey":"6Le-v2","proxyType":"socks5","proxyAddress":"10.1.2.3","proxyPort":1080,"proxyLogin":"u","proxyPassword":"p"}`,
		provider.Task{Method: "userrecaptcha", Params: map[string]string{"pageurl": "https://shop.example/", "googlekey": "6Le-v2", "proxy": "u:p@10.1.2.3:1080", "proxytype": "SOCKS5"}}},
	{"Anti-Captcha NoCaptchaTaskProxyless", `{"type":"NoCaptchaTaskProxyless","websiteURL":"https://shop.example/","websiteKey":"6Le-nc"}`,
		provider.Task{Method: "userrecaptcha", Params: map[string]string{"pageurl": "https://shop.example/", "googlekey": "6Le-nc"}}},
	{"CapMonster NoCaptchaTask, no proxy", `{"type":"NoCaptchaTask","websiteURL":"https://shop.example/","websiteKey":"6Le-nc"}`,
		provider.Task{Method: "userrecaptcha", Params: map[string]string{"pageurl": "https://shop.example/", "googlekey": "6Le-nc"}}},
	{"CapSolver's spelling", `{"type":"ReCaptchaV2TaskProxyless","WebsiteURL":"https://shop.example/","websitekey":"6Le-cs"}`,
		provider.Task{Method: "userrecaptcha", Params: map[string]string{"pageurl": "https://shop.example/", "googlekey": "6Le-cs"}}},
	{"reCAPTCHA v2 Enterprise", `{"type":"RecaptchaV2EnterpriseTaskProxyless","websiteURL":"https://shop.example/","websiteKey":"6Le-e"}`,
		provider.Task{Method: "userrecaptcha", Params: map[string]string{"pageurl": "https://shop.example/", "googlekey": "6Le-e", "enterprise": "1"}}},
	{"reCAPTCHA v3", `{"type":"RecaptchaV3TaskProxyless","websiteURL":"https://shop.example/","websiteKey":"6Le-v3","minScore":0.3,"pageAction":"login","isEnterprise":true}`,
		provider.Task{Method: "userrecaptcha", Params: map[string]string{"version": "v3", "pageurl": "https://shop.example/", "googlekey": "6Le-v3", "min_score": "0.3", "action": "login", "enterprise": "1"}}},
	{"reCAPTCHA v3 Enterprise (CapMonster)", `{"type":"RecaptchaV3EnterpriseTask","websiteURL":"https://shop.example/","websiteKey":"6Le-v3","minScore":"0.7"}`,
		provider.Task{Method: "userrecaptcha", Params: map[string]string{"version": "v3", "enterprise": "1", "pageurl": "https://shop.example/", "googlekey": "6Le-v3", "min_score": "0.7"}}},
	{"Turnstile", `{"type":"TurnstileTaskProxyless","websiteURL":"https://shop.example/login","websiteKey":"0x4AAA","action":"login","data":"cd","pagedata":"pd","userAgent":"UA"}`,
		provider.Task{Method: "turnstile", Params: map[string]string{"pageurl": "https://shop.example/login", "sitekey": "0x4AAA", "action": "login", "data": "cd", "pagedata": "pd", "userAgent": "UA"}}},
	{"Turnstile, Anti-Captcha's and CapMonster's field names", `{"type":"TurnstileTask","websiteURL":"https://shop.example/","websiteKey":"0x4AAA","pageAction":"pay","turnstileCData":"cd","cloudflareTaskType":"token"}`,
		provider.Task{Method: "turnstile", Params: map[string]string{"pageurl": "https://shop.example/", "sitekey": "0x4AAA", "action": "pay", "data": "cd"}}},
	{"Turnstile with a proxy", `{"type":"TurnstileTask","websiteURL":"https://shop.example/","websiteKey":"0x4AAA","proxyType":"http","proxyAddress":"proxy.example","proxyPort":"3128"}`,
		provider.Task{Method: "turnstile", Params: map[string]string{"pageurl": "https://shop.example/", "sitekey": "0x4AAA", "proxy": "proxy.example:3128", "proxytype": "HTTP"}}},
	{"CapSolver AntiTurnstileTaskProxyless", `{"type":"AntiTurnstileTaskProxyless","websiteURL":"https://shop.example/","websiteKey":"0x4AAA"}`,
		provider.Task{Method: "turnstile", Params: map[string]string{"pageurl": "https://shop.example/", "sitekey": "0x4AAA"}}},
	{"GeeTest v3", `{"type":"GeeTestTaskProxyless","websiteURL":"https://shop.example/","gt":"gt1","challenge":"ch1","geetestApiServerSubdomain":"api-na.geetest.com","version":3}`,
		provider.Task{Method: "geetest", Params: map[string]string{"pageurl": "https://shop.example/", "gt": "gt1", "challenge": "ch1", "api_server": "api-na.geetest.com"}}},
	{"GeeTest v4", `{"type":"GeeTestTask","websiteURL":"https://shop.example/","gt":"ignored","version":4,"initParameters":{"captcha_id":"e392e1d7"}}`,
		provider.Task{Method: "geetest_v4", Params: map[string]string{"pageurl": "https://shop.example/", "captcha_id": "e392e1d7"}}},
	{"hCaptcha", `{"type":"HCaptchaTaskProxyless","websiteURL":"https://shop.example/","websiteKey":"hc-key","isInvisible":true,"userAgent":"UA"}`,
		provider.Task{Method: "hcaptcha", Params: map[string]string{"pageurl": "https://shop.example/", "sitekey": "hc-key", "invisible": "1", "userAgent": "UA"}}},
	{"FunCaptcha", `{"type":"FunCaptchaTaskProxyless","websiteURL":"https://shop.example/","websitePublicKey":"pk","funcaptchaApiJSSubdomain":"client-api.arkoselabs.com"}`,
		provider.Task{Method: "funcaptcha", Params: map[string]string{"pageurl": "https://shop.example/", "publickey": "pk", "surl": "client-api.arkoselabs.com"}}},
	{"cf_clearance", `{"type":"TurnstileTask","cloudflareTaskType":"cf_clearance","websiteURL":"https://shop.example/","websiteKey":"0x4AAA","htmlPageBase64":"` + html + `","userAgent":"UA","proxyType":"http","proxyAddress":"10.1.2.3","proxyPort":8080}`,
		provider.Task{Method: "cloudflare_challenge", Params: map[string]string{"pageurl": "https://shop.example/", "sitekey": "0x4AAA", "htmlPageBase64": html, "userAgent": "UA", "proxy": "10.1.2.3:8080", "proxytype": "HTTP"}}},
	{"reCAPTCHA v2 Enterprise with its payload and API domain", `{"type":"RecaptchaV2EnterpriseTask","websiteURL":"https://shop.example/","websiteKey":"6Le-e","enterprisePayload":{"s":"S-1"},"apiDomain":"recaptcha.net","proxyType":"http","proxyAddress":"10.1.2.3","proxyPort":8080}`,
		provider.Task{Method: "userrecaptcha", Params: map[string]string{"pageurl": "https://shop.example/", "googlekey": "6Le-e", "enterprise": "1", "data-s": "S-1", "domain": "recaptcha.net", "proxy": "10.1.2.3:8080", "proxytype": "HTTP"}}},
	{"reCAPTCHA v2 Enterprise, the payload's s also as recaptchaDataSValue", `{"type":"RecaptchaV2EnterpriseTaskProxyless","websiteURL":"https://shop.example/","websiteKey":"6Le-e","enterprisePayload":{"S":"S-1"},"recaptchaDataSValue":"S-1"}`,
		provider.Task{Method: "userrecaptcha", Params: map[string]string{"pageurl": "https://shop.example/", "googlekey": "6Le-e", "enterprise": "1", "data-s": "S-1"}}},
	{"grid", `{"type":"GridTask","body":"` + png + `","rows":4,"columns":4,"comment":"select all buses","imgInstructions":"` + png + `"}`,
		provider.Task{Method: "base64", Params: map[string]string{"body": png, "recaptcha": "1", "recaptcharows": "4", "recaptchacols": "4", "textinstructions": "select all buses", "imginstructions": png}}},
	{"Lemin", `{"type":"LeminTaskProxyless","websiteURL":"https://shop.example/","captchaId":"CROPPED_3dfdd5c_d1872b526b794d83ba3b365eb15a200b","divId":"lemin-cropped-captcha","leminApiServerSubdomain":"api.leminnow.com","userAgent":"UA"}`,
		provider.Task{Method: "lemin", Params: map[string]string{"pageurl": "https://shop.example/", "captcha_id": "CROPPED_3dfdd5c_d1872b526b794d83ba3b365eb15a200b", "div_id": "lemin-cropped-captcha", "api_server": "api.leminnow.com", "userAgent": "UA"}}},
	{"CaptchaFox", `{"type":"CaptchaFoxTask","websiteURL":"https://shop.example/","websiteKey":"sk_fox","userAgent":"UA","proxyType":"socks5","proxyAddress":"10.1.2.3","proxyPort":1080}`,
		provider.Task{Method: "captchafox", Params: map[string]string{"pageurl": "https://shop.example/", "sitekey": "sk_fox", "userAgent": "UA", "proxy": "10.1.2.3:1080", "proxytype": "SOCKS5"}}},
	{"Friendly Captcha", `{"type":"FriendlyCaptchaTaskProxyless","websiteURL":"https://shop.example/","websiteKey":"FCM-1"}`,
		provider.Task{Method: "friendly_captcha", Params: map[string]string{"pageurl": "https://shop.example/", "sitekey": "FCM-1"}}},
}

func TestParseTask(t *testing.T) {
	t.Parallel()
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			got, f := ParseTask([]byte(tc.task))
			if f != nil {
				t.Fatalf("ParseTask: %v", f)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("task (-want +got):\n%s", diff)
			}
		})
	}
}

// Every type name of the table is taken, in any letter case.
func TestParseTaskEveryName(t *testing.T) {
	t.Parallel()
	for _, n := range names {
		for _, spelled := range []string{n.name, strings.ToUpper(n.name), strings.ToLower(n.name)} {
			task := `{"type":"` + spelled + `","websiteURL":"https://a.example/","websiteKey":"k","gt":"g","challenge":"c","body":"` + png + `","websitePublicKey":"pk"`
			if n.t.needs != nil {
				task += `,"userAgent":"UA","proxyType":"http","proxyAddress":"10.0.0.1","proxyPort":80`
			}
			task += "}"
			got, f := ParseTask([]byte(task))
			if f != nil {
				t.Fatalf("%s: %v", spelled, f)
			}
			if got.Method != n.t.method {
				t.Errorf("%s: method %q, want %q", spelled, got.Method, n.t.method)
			}
			k, err := got.KindFor(provider.KnownMethods)
			if err != nil || k != n.t.kind {
				t.Errorf("%s: kind %q (%v), want %q", spelled, k, err, n.t.kind)
			}
		}
	}
}

func TestParseTaskFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, task, code, in string
	}{
		{"absent", ``, "ERROR_TASK_ABSENT", "task: required"},
		{"null", `null`, "ERROR_TASK_ABSENT", "task: required"},
		{"not an object", `"TurnstileTaskProxyless"`, "ERROR_BAD_PARAMETERS", "task: must be a JSON object"},
		{"no type", `{"websiteURL":"https://a.example/"}`, "ERROR_TASK_NOT_SUPPORTED", "task.type: required"},
		{"type not a string", `{"type":7}`, "ERROR_TASK_NOT_SUPPORTED", "task.type: required"},
		{"unknown type", `{"type":"KeyCaptchaTask"}`, "ERROR_TASK_NOT_SUPPORTED", `"KeyCaptchaTask" is not a type captchaq solves`},
		{"one field in two cases", `{"type":"TurnstileTaskProxyless","websiteKey":"a","websitekey":"b"}`, "ERROR_BAD_PARAMETERS", "name one field"},
		{"bad flag", `{"type":"RecaptchaV2TaskProxyless","isInvisible":"maybe"}`, "ERROR_BAD_PARAMETERS", "task.isInvisible: must be true or false"},
		{"bad number", `{"type":"RecaptchaV3TaskProxyless","minScore":"high"}`, "ERROR_BAD_PARAMETERS", "task.minScore: must be a number"},
		{"object for a string", `{"type":"TurnstileTaskProxyless","websiteKey":{"a":1}}`, "ERROR_BAD_PARAMETERS", "task.websiteKey: must be a string"},
		{"proxy on a Proxyless type", `{"type":"TurnstileTaskProxyless","proxyAddress":"1.2.3.4","proxyPort":80}`, "ERROR_BAD_PARAMETERS", "use TurnstileTask to send a proxy"},
		{"proxy on an image", `{"type":"ImageToTextTask","proxyType":"http"}`, "ERROR_BAD_PARAMETERS", "ImageToTextTask takes no proxy"},
		{"proxy without a port", `{"type":"RecaptchaV2Task","proxyType":"http","proxyAddress":"1.2.3.4"}`, "ERROR_BAD_PROXY", "task.proxyPort: required"},
		{"proxy without a type", `{"type":"RecaptchaV2Task","proxyAddress":"1.2.3.4","proxyPort":80}`, "ERROR_BAD_PROXY", "task.proxyType: required"},
		{"proxy login alone", `{"type":"RecaptchaV2Task","proxyType":"http","proxyAddress":"1.2.3.4","proxyPort":80,"proxyLogin":"u"}`, "ERROR_BAD_PROXY", "give both or neither"},
		{"proxy login with ':'", `{"type":"RecaptchaV2Task","proxyType":"http","proxyAddress":"1.2.3.4","proxyPort":80,"proxyLogin":"u:x","proxyPassword":"p"}`, "ERROR_BAD_PROXY", "task.proxyLogin: may not hold ':'"},
		{"GeeTest version 5", `{"type":"GeeTestTaskProxyless","version":5}`, "ERROR_BAD_PARAMETERS", "task.version: \"5\""},
		{"GeeTest v4 without captcha_id", `{"type":"GeeTestTaskProxyless","version":4,"initParameters":{}}`, "ERROR_BAD_PARAMETERS", "initParameters.captcha_id: required"},
		{"in.php's soft_id spelled with a dot", `{"type":"TurnstileTaskProxyless","websiteURL":"https://a.example/","websiteKey":"0x4","soft.id":"4242"}`, "ERROR_BAD_PARAMETERS", "task.soft.id: read as in.php's own field soft_id"},
		{"in.php's header_acao with a space", `{"type":"TurnstileTaskProxyless","header acao":"1"}`, "ERROR_BAD_PARAMETERS", "task.header acao: read as in.php's own field header_acao"},
		{"in.php's pingback cut by a NUL", `{"type":"TurnstileTaskProxyless","pingback\u0000":"https://attacker.example/cb"}`, "ERROR_BAD_PARAMETERS", `task."pingback\x00": read as in.php's own field pingback`},
		{"CapMonster wait_room", `{"type":"TurnstileTask","cloudflareTaskType":"wait_room"}`, "ERROR_TASK_NOT_SUPPORTED", `task.cloudflareTaskType: "wait_room" is not supported; use "token"`},
		{"cf_clearance without the page", `{"type":"TurnstileTask","cloudflareTaskType":"cf_clearance","websiteURL":"https://a.example/","userAgent":"UA","proxyType":"http","proxyAddress":"10.0.0.1","proxyPort":80}`, "ERROR_BAD_PARAMETERS", `task.htmlPageBase64: required for TurnstileTask with cloudflareTaskType "cf_clearance"; the challenge page's HTML`},
		{"cf_clearance without a user agent", `{"type":"TurnstileTask","cloudflareTaskType":"CF_CLEARANCE","websiteURL":"https://a.example/","htmlPageBase64":"PGh0bWw+","proxyType":"http","proxyAddress":"10.0.0.1","proxyPort":80}`, "ERROR_BAD_PARAMETERS", "task.userAgent: required for TurnstileTask with"},
		{"cf_clearance without the site key", `{"type":"TurnstileTask","cloudflareTaskType":"cf_clearance","websiteURL":"https://a.example/","htmlPageBase64":"PGh0bWw+","userAgent":"UA","proxyType":"http","proxyAddress":"10.0.0.1","proxyPort":80}`, "ERROR_BAD_PARAMETERS", `task.websiteKey: required for TurnstileTask with cloudflareTaskType "cf_clearance"; the Turnstile site key`},
		{"cf_clearance on the Proxyless type", `{"type":"TurnstileTaskProxyless","cloudflareTaskType":"cf_clearance","websiteURL":"https://a.example/","websiteKey":"0x4","htmlPageBase64":"PGh0bWw+","userAgent":"UA"}`, "ERROR_BAD_PROXY", `task.proxyAddress: a proxy is required for TurnstileTaskProxyless with cloudflareTaskType "cf_clearance": send TurnstileTask with the proxy`},
		{"CaptchaFox without a proxy", `{"type":"CaptchaFoxTask","websiteURL":"https://a.example/","websiteKey":"sk","userAgent":"UA"}`, "ERROR_BAD_PROXY", "task.proxyAddress: a proxy is required for CaptchaFoxTask"},
		{"CaptchaFox without a user agent", `{"type":"CaptchaFoxTask","websiteURL":"https://a.example/","websiteKey":"sk"}`, "ERROR_BAD_PARAMETERS", "task.userAgent: required for CaptchaFoxTask"},
		{"Friendly Captcha's proxy on its Proxyless type", `{"type":"FriendlyCaptchaTaskProxyless","proxyType":"http","proxyAddress":"10.0.0.1","proxyPort":80}`, "ERROR_BAD_PARAMETERS", "use FriendlyCaptchaTask to send a proxy"},
		{"enterprisePayload on a type that is not Enterprise", `{"type":"RecaptchaV2TaskProxyless","enterprisePayload":{"s":"x"}}`, "ERROR_BAD_PARAMETERS", "task.enterprisePayload: RecaptchaV2TaskProxyless takes none; use RecaptchaV2EnterpriseTaskProxyless"},
		{"enterprisePayload not an object", `{"type":"RecaptchaV2EnterpriseTaskProxyless","enterprisePayload":"s=x"}`, "ERROR_BAD_PARAMETERS", `task.enterprisePayload: must be a JSON object, got "s=x", such as {"s":"…"}`},
		{"enterprisePayload with a field in.php cannot carry", `{"type":"RecaptchaV2EnterpriseTaskProxyless","enterprisePayload":{"s":"x","rqdata":"y"}}`, "ERROR_BAD_PARAMETERS", "task.enterprisePayload.rqdata: not carried: only s is"},
		{"enterprisePayload's s not a string", `{"type":"RecaptchaV2EnterpriseTaskProxyless","enterprisePayload":{"s":{}}}`, "ERROR_BAD_PARAMETERS", "task.enterprisePayload.s: must be a string"},
		{"enterprisePayload's s and recaptchaDataSValue differ", `{"type":"RecaptchaV2EnterpriseTaskProxyless","enterprisePayload":{"s":"x"},"recaptchaDataSValue":"y"}`, "ERROR_BAD_PARAMETERS", "differs from task.recaptchaDataSValue"},
		{"grid rows not a number", `{"type":"GridTask","rows":"four"}`, "ERROR_BAD_PARAMETERS", "task.rows: must be a number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, f := ParseTask([]byte(tc.task))
			if f == nil || f.Code != tc.code || f.ID != errorID(tc.code) || !strings.Contains(f.Description, tc.in) {
				t.Errorf("ParseTask(%s) = %+v, want %s (errorId %d) with %q", tc.task, f, tc.code, errorID(tc.code), tc.in)
			}
		})
	}
}

// The task object a provider is sent for each kind, and it reads back
// into the same task.
func TestTaskObject(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		task provider.Task
		want string
	}{
		{provider.Task{Method: "base64", Params: map[string]string{"body": png, "phrase": "1", "regsense": "1", "numeric": "2", "calc": "1", "min_len": "4", "max_len": "6", "textinstructions": "red"}},
			`{"type":"ImageToTextTask","body":"` + png + `","phrase":true,"case":true,"numeric":2,"math":true,"minLength":4,"maxLength":6,"comment":"red"}`},
		{provider.Task{Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le", "pageurl": "https://a.example/", "invisible": "1", "data-s": "ds", "userAgent": "UA", "cookies": "a=b"}},
			`{"type":"RecaptchaV2TaskProxyless","websiteURL":"https://a.example/","websiteKey":"6Le","recaptchaDataSValue":"ds","isInvisible":true,"userAgent":"UA","cookies":"a=b"}`},
		{provider.Task{Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le", "pageurl": "https://a.example/", "proxy": "u:p@10.0.0.1:8080", "proxytype": "HTTPS"}},
			`{"type":"RecaptchaV2Task","websiteURL":"https://a.example/","websiteKey":"6Le","proxyType":"https","proxyAddress":"10.0.0.1","proxyPort":8080,"proxyLogin":"u","proxyPassword":"p"}`},
		{provider.Task{Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le", "pageurl": "https://a.example/", "enterprise": "1"}},
			`{"type":"RecaptchaV2EnterpriseTaskProxyless","websiteURL":"https://a.example/","websiteKey":"6Le"}`},
		{provider.Task{Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le", "pageurl": "https://a.example/", "version": "v3", "action": "login", "min_score": "0.3", "enterprise": "1"}},
			`{"type":"RecaptchaV3TaskProxyless","websiteURL":"https://a.example/","websiteKey":"6Le","minScore":0.3,"pageAction":"login","isEnterprise":true}`},
		{provider.Task{Method: "turnstile", Params: map[string]string{"sitekey": "0x4", "pageurl": "https://a.example/", "action": "pay", "data": "cd", "pagedata": "pd", "userAgent": "UA"}},
			`{"type":"TurnstileTaskProxyless","websiteURL":"https://a.example/","websiteKey":"0x4","action":"pay","data":"cd","pagedata":"pd","userAgent":"UA"}`},
		{provider.Task{Method: "geetest", Params: map[string]string{"gt": "g", "challenge": "c", "pageurl": "https://a.example/", "api_server": "api.geetest.com"}},
			`{"type":"GeeTestTaskProxyless","websiteURL":"https://a.example/","gt":"g","challenge":"c","geetestApiServerSubdomain":"api.geetest.com","version":3}`},
		{provider.Task{Method: "geetest_v4", Params: map[string]string{"captcha_id": "cid", "pageurl": "https://a.example/"}},
			`{"type":"GeeTestTaskProxyless","websiteURL":"https://a.example/","version":4,"initParameters":{"captcha_id":"cid"}}`},
		{provider.Task{Method: "hcaptcha", Params: map[string]string{"sitekey": "hk", "pageurl": "https://a.example/", "invisible": "1"}},
			`{"type":"HCaptchaTaskProxyless","websiteURL":"https://a.example/","websiteKey":"hk","isInvisible":true}`},
		{provider.Task{Method: "funcaptcha", Params: map[string]string{"publickey": "pk", "pageurl": "https://a.example/", "surl": "s.example"}},
			`{"type":"FunCaptchaTaskProxyless","websiteURL":"https://a.example/","websitePublicKey":"pk","funcaptchaApiJSSubdomain":"s.example"}`},
		{provider.Task{Method: "cloudflare_challenge", Params: map[string]string{"pageurl": "https://a.example/", "sitekey": "0x4", "htmlPageBase64": "PGh0bWw+", "userAgent": "UA", "proxy": "u:p@10.0.0.1:8080", "proxytype": "HTTP"}},
			`{"type":"TurnstileTask","cloudflareTaskType":"cf_clearance","websiteURL":"https://a.example/","websiteKey":"0x4","htmlPageBase64":"PGh0bWw+","userAgent":"UA","proxyType":"http","proxyAddress":"10.0.0.1","proxyPort":8080,"proxyLogin":"u","proxyPassword":"p"}`},
		{provider.Task{Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le", "pageurl": "https://a.example/", "enterprise": "1", "data-s": "S-1", "domain": "recaptcha.net"}},
			`{"type":"RecaptchaV2EnterpriseTaskProxyless","websiteURL":"https://a.example/","websiteKey":"6Le","enterprisePayload":{"s":"S-1"},"apiDomain":"recaptcha.net"}`},
		{provider.Task{Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le", "pageurl": "https://a.example/", "version": "v3", "domain": "google.com"}},
			`{"type":"RecaptchaV3TaskProxyless","websiteURL":"https://a.example/","websiteKey":"6Le","apiDomain":"google.com"}`},
		{provider.Task{Method: "base64", Params: map[string]string{"body": png, "recaptcha": "1", "recaptcharows": "4", "recaptchacols": "3", "textinstructions": "buses", "imginstructions": png}},
			`{"type":"GridTask","body":"` + png + `","rows":4,"columns":3,"comment":"buses","imgInstructions":"` + png + `"}`},
		{provider.Task{Method: "lemin", Params: map[string]string{"captcha_id": "CROPPED_1", "pageurl": "https://a.example/", "div_id": "lemin-cropped-captcha", "api_server": "api.leminnow.com"}},
			`{"type":"LeminTaskProxyless","websiteURL":"https://a.example/","captchaId":"CROPPED_1","divId":"lemin-cropped-captcha","leminApiServerSubdomain":"api.leminnow.com"}`},
		{provider.Task{Method: "captchafox", Params: map[string]string{"sitekey": "sk", "pageurl": "https://a.example/", "userAgent": "UA", "proxy": "10.0.0.1:1080", "proxytype": "SOCKS5"}},
			`{"type":"CaptchaFoxTask","websiteURL":"https://a.example/","websiteKey":"sk","userAgent":"UA","proxyType":"socks5","proxyAddress":"10.0.0.1","proxyPort":1080}`},
		{provider.Task{Method: "friendly_captcha", Params: map[string]string{"sitekey": "FCM", "pageurl": "https://a.example/", "proxy": "10.0.0.1:80", "proxytype": "HTTP"}},
			`{"type":"FriendlyCaptchaTask","websiteURL":"https://a.example/","websiteKey":"FCM","proxyType":"http","proxyAddress":"10.0.0.1","proxyPort":80}`},
	} {
		t.Run(tc.task.Method, func(t *testing.T) {
			obj, err := TaskObject(tc.task)
			if err != nil {
				t.Fatal(err)
			}
			var got, want any
			b, _ := json.Marshal(obj)
			json.Unmarshal(b, &got)
			json.Unmarshal([]byte(tc.want), &want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("task object (-want +got):\n%s", diff)
			}
			back, f := ParseTask(b)
			if f != nil {
				t.Fatalf("ParseTask of the object: %v", f)
			}
			if diff := cmp.Diff(tc.task, back); diff != "" {
				t.Errorf("read back (-sent +read):\n%s", diff)
			}
		})
	}
	// A post task's image goes as the body.
	obj, err := TaskObject(provider.Task{Method: "post", Params: map[string]string{"file": png}})
	if err != nil || obj["type"] != "ImageToTextTask" || obj["body"] != png {
		t.Errorf("post task: %v, %v", obj, err)
	}
	if _, err := TaskObject(provider.Task{Method: "bls"}); !errors.Is(err, provider.ErrUnsupportedType) {
		t.Errorf("bls: %v, want ErrUnsupportedType", err)
	}
	// What a createTask service requires of a type and in.php does not is
	// refused before it is sent, naming the param.
	for _, tc := range []struct {
		task provider.Task
		want string
	}{
		{provider.Task{Method: "captchafox", Params: map[string]string{"sitekey": "sk", "pageurl": "https://a.example/", "proxy": "10.0.0.1:80"}},
			"params.userAgent: required to send a captchafox task to a createTask service (its userAgent)"},
		{provider.Task{Method: "cloudflare_challenge", Params: map[string]string{"pageurl": "https://a.example/", "proxy": "10.0.0.1:80", "proxytype": "HTTP", "userAgent": "UA"}},
			"params.htmlPageBase64: required to send a cloudflare_challenge task to a createTask service (its htmlPageBase64)"},
	} {
		_, err := TaskObject(tc.task)
		if !errors.Is(err, provider.ErrInvalidTask) || !strings.HasPrefix(fmt.Sprint(err), tc.want) {
			t.Errorf("%s: %v, want %q", tc.task.Method, err, tc.want)
		}
	}
}

// Every type × solution field: what the front answers, and what the
// provider side reads back from it.
func TestSolution(t *testing.T) {
	t.Parallel()
	gt3 := json.RawMessage(`{"geetest_challenge":"c1","geetest_validate":"v1","geetest_seccode":"s1|jordan"}`)
	gt4 := json.RawMessage(`{"captcha_id":"cid","lot_number":"ln","pass_token":"pt","gen_time":"1700000000","captcha_output":"co"}`)
	for _, tc := range []struct {
		kind   provider.Kind
		token  string
		raw    json.RawMessage
		params map[string]string
		want   string
	}{
		{provider.KindImage, "w4k9", nil, nil, `{"text":"w4k9"}`},
		{provider.KindRecaptchaV2, "03Aab", nil, nil, `{"gRecaptchaResponse":"03Aab","token":"03Aab"}`},
		{provider.KindRecaptchaV3, "03Acd", nil, nil, `{"gRecaptchaResponse":"03Acd","token":"03Acd"}`},
		{provider.KindTurnstile, "0.tt", nil, map[string]string{"userAgent": "MyUA"}, `{"token":"0.tt","userAgent":"MyUA"}`},
		{provider.KindTurnstile, "0.tt", nil, nil, `{"token":"0.tt"}`},
		{provider.KindTurnstile, "0.tt", json.RawMessage(`{"status":1,"request":"0.tt","useragent":"SolvedUA"}`), map[string]string{"userAgent": "MyUA"}, `{"token":"0.tt","userAgent":"SolvedUA"}`},
		{provider.KindTurnstile, "0.tt", json.RawMessage(`{"token":"0.tt","UserAgent":"SolvedUA"}`), nil, `{"token":"0.tt","userAgent":"SolvedUA"}`},
		{provider.KindHCaptcha, "P1_x", json.RawMessage(`{"status":1,"request":"P1_x","user_agent":"SolvedUA"}`), nil, `{"gRecaptchaResponse":"P1_x","token":"P1_x","userAgent":"SolvedUA"}`},
		{provider.KindHCaptcha, "P1_x", nil, nil, `{"gRecaptchaResponse":"P1_x","token":"P1_x"}`},
		{provider.KindRecaptchaV2, "03Aab", json.RawMessage(`{"gRecaptchaResponse":"03Aab","cookies":{"_GRECAPTCHA":"g1"},"userAgent":"SolvedUA"}`), map[string]string{"userAgent": "MyUA"}, `{"gRecaptchaResponse":"03Aab","token":"03Aab","cookies":{"_GRECAPTCHA":"g1"},"userAgent":"SolvedUA"}`},
		{provider.KindCloudflareChallenge, "cfv", json.RawMessage(`{"status":1,"request":"cfv","user_agent":"SolvedUA","proxy":"1.2.3.4:8080"}`), nil, `{"cf_clearance":"cfv","userAgent":"SolvedUA","proxy":"1.2.3.4:8080"}`},
		{provider.KindCloudflareChallenge, `{"cf_clearance":"cfv","user_agent":"SolvedUA"}`, json.RawMessage(`{"cf_clearance":"cfv","user_agent":"SolvedUA"}`), map[string]string{"userAgent": "MyUA"}, `{"cf_clearance":"cfv","userAgent":"SolvedUA"}`},
		{provider.KindCloudflareChallenge, "cfv", nil, map[string]string{"userAgent": "MyUA"}, `{"cf_clearance":"cfv","userAgent":"MyUA"}`},
		{provider.KindGrid, "click:2/5/9", nil, nil, `{"click":[2,5,9]}`},
		{provider.KindFriendlyCaptcha, "fc.AgAD", nil, nil, `{"token":"fc.AgAD"}`},
		{provider.KindHCaptcha, "P1_x", nil, map[string]string{"useragent": "UA2"}, `{"gRecaptchaResponse":"P1_x","token":"P1_x","userAgent":"UA2"}`},
		{provider.KindFunCaptcha, "fc|r=1", nil, nil, `{"token":"fc|r=1"}`},
		{provider.KindGeeTest, string(gt3), gt3, nil, `{"challenge":"c1","validate":"v1","seccode":"s1|jordan"}`},
		{provider.KindGeeTestV4, string(gt4), gt4, nil, string(gt4)},
		{provider.KindCaptchaFox, "fox", nil, nil, `{"token":"fox"}`},
		{provider.KindLemin, `{"answer":"0xa","challenge_id":"x"}`, json.RawMessage(`{"answer":"0xa","challenge_id":"x"}`), nil, `{"answer":"0xa","challenge_id":"x"}`},
		{provider.KindCaptchaFox, "fox", nil, map[string]string{"userAgent": "FoxUA"}, `{"token":"fox","userAgent":"FoxUA"}`},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			sol := Solution(tc.kind, tc.token, tc.raw, tc.params)
			b, _ := json.Marshal(sol)
			var got, want any
			json.Unmarshal(b, &got)
			json.Unmarshal([]byte(tc.want), &want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("solution (-want +got):\n%s", diff)
			}
			a, ok := answerOf(b)
			if !ok {
				t.Fatalf("answerOf(%s): no answer", b)
			}
			wantRaw, token := tc.token, tc.token
			if tc.raw != nil {
				wantRaw = string(tc.raw)
			}
			if cf, ok := sol["cf_clearance"].(string); ok {
				token = cf // the cookie is the token
			}
			if !provider.BindingsOf(tc.raw).Empty() {
				// read back as the token, and the solution that binds it
				if a.Token != token || !jsonEqual(a.Raw, string(b)) || !cmp.Equal(provider.BindingsOf(a.JSON), provider.BindingsOf(b)) {
					t.Errorf("read back %+v, want the token %s and the solution %s", a, token, b)
				}
				return
			}
			if a.Token != wantRaw && !jsonEqual(a.Raw, wantRaw) {
				t.Errorf("read back %+v, want the answer %s", a, wantRaw)
			}
		})
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && cmp.Equal(x, y)
}

// Every row of the code table, in each direction it is read.
func TestCodes(t *testing.T) {
	t.Parallel()
	firstFor := map[string]codeRow{} // in.php code → the row the front answers
	queueFor := map[string]codeRow{} // createTask code → the row the provider side reads
	for _, r := range codes {
		if _, ok := firstFor[r.inphp]; !ok && r.way != toQueue {
			firstFor[r.inphp] = r
		}
		if _, ok := queueFor[r.wire]; !ok && r.way != toWire {
			queueFor[r.wire] = r
		}
	}
	for _, r := range codes {
		t.Run(r.wire+"/"+r.inphp, func(t *testing.T) {
			if r.way != toQueue {
				f := FrontFault(r.inphp, "why")
				if want := firstFor[r.inphp]; f.Code != want.wire || f.ID != want.id || f.Description != "why" {
					t.Errorf("FrontFault(%s) = %+v, want %s (errorId %d)", r.inphp, f, want.wire, want.id)
				}
				if f.Code != r.wire {
					t.Errorf("%s is answered %s, not this row's %s: a row the front cannot reach", r.inphp, f.Code, r.wire)
				}
			}
			if r.way != toWire {
				if got := QueueCode(r.wire); got != queueFor[r.wire].inphp {
					t.Errorf("QueueCode(%s) = %s, want %s", r.wire, got, queueFor[r.wire].inphp)
				}
				e := classify("poll", r.wire, "desc")
				want := provider.Classify("poll", r.inphp, "")
				if e.Code != r.inphp || e.Class != want.Class || e.RetryAfter != want.RetryAfter {
					t.Errorf("classify(%s) = %s %v, want %s %v", r.wire, e.Code, e.Class, r.inphp, want.Class)
				}
			}
		})
	}
	// The queue's classes the issue names, from the service's own codes.
	for code, class := range map[string]provider.Class{
		"ERROR_KEY_DOES_NOT_EXIST": provider.ClassAccount, "ERROR_IP_BLOCKED": provider.ClassAccount,
		"ERROR_NO_SLOT_AVAILABLE": provider.ClassNoSlot, "ERROR_ZERO_BALANCE": provider.ClassNoSlot,
		"ERROR_CAPTCHA_UNSOLVABLE": provider.ClassUnsolvable, "ERROR_RECAPTCHA_TIMEOUT": provider.ClassUnsolvable,
		"ERROR_NO_SUCH_CAPCHA_ID": provider.ClassTask, "ERROR_TASK_NOT_SUPPORTED": provider.ClassTask,
		"ERROR_TOO_MUCH_REQUESTS": provider.ClassRateLimit, "ERROR_SERVICE_UNAVALIABLE": provider.ClassTransient,
		"ERROR_SOMETHING_NEW": provider.ClassUnsolvable,
	} {
		if got := classify("submit", code, "").Class; got != class {
			t.Errorf("%s: class %v, want %v", code, got, class)
		}
	}
	// Codes outside the table.
	for _, tc := range []struct{ in, code string }{
		{"ERROR: 1001", "ERROR_NO_SLOT_AVAILABLE"},
		{"ERROR_SOMETHING_NEW", "ERROR_SOMETHING_NEW"},
		{"EXPIRED", "ERROR_CAPTCHA_UNSOLVABLE"},
		{"CANCELED", "ERROR_CAPTCHA_UNSOLVABLE"},
	} {
		if f := FrontFault(tc.in, ""); f.Code != tc.code || f.ID == 0 || f.Description == "" {
			t.Errorf("FrontFault(%s) = %+v, want %s", tc.in, f, tc.code)
		}
	}
}

// The createTask services' refusals of a type (CapMonster's, Anti-Captcha's
// and CapSolver's answers for hCaptcha and for a renamed Turnstile type)
// are refusals of the type at the queue.
func TestClassifyTypeRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code, description string
		want              bool
	}{
		{"ERROR_TASK_NOT_SUPPORTED", "Task type is not supported or typed incorrectly.", true},
		{"ERROR_TASK_TYPE_DEPRECATED", "This captcha type is deprecated.", true},
		{"ERROR_INVALID_TASK_DATA", "We do not support hcaptcha. Please contact customer service for details.", true},
		{"ERROR_INVALID_TASK_DATA", "unsupported captcha type, please check if the type is correct: TurnstileTaskProxyLess", true},
		{"ERROR_INVALID_TASK_DATA", "Not found HCaptchaTaskProxyLess access. Please contact our support.", true},
		{"ERROR_INVALID_TASK_DATA", "websiteURL is required", false},
		{"ERROR_NO_SUCH_METHOD", "", true},
		{"ERROR_ZERO_BALANCE", "", false},
	} {
		e := classify("submit", tc.code, tc.description)
		if got := e.TypeRefused(); got != tc.want {
			t.Errorf("%s %q: TypeRefused = %v (code %s), want %v", tc.code, tc.description, got, e.Code, tc.want)
		}
		if tc.want && e.Class != provider.ClassTask {
			t.Errorf("%s: class %v, want task", tc.code, e.Class)
		}
	}
}
