package server_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/provider/createtask"
)

// newTypeUA is the user agent a new type's task is solved for.
const newTypeUA = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) Bound/48"

// newType is one type createTask took last, as each front takes it.
type newType struct {
	name   string
	task   string     // the createTask task object
	in     url.Values // the same task as in.php's
	fields []string   // the solution's
}

// newTypes are a challenge page's cf_clearance, reCAPTCHA Enterprise's
// payload and API domain, grid, Lemin, CaptchaFox and Friendly Captcha.
func newTypes() []newType {
	const page = "PGh0bWw+PHRpdGxlPkp1c3QgYSBtb21lbnQuLi48L3RpdGxlPjwvaHRtbD4="
	const ua = newTypeUA
	proxyCT := `"proxyType":"http","proxyAddress":"10.1.2.3","proxyPort":8080`
	return []newType{
		{"cf_clearance",
			`{"type":"TurnstileTask","cloudflareTaskType":"cf_clearance","websiteURL":"https://shop.example/","websiteKey":"0x4AAA","htmlPageBase64":"` + page + `","userAgent":"` + ua + `",` + proxyCT + `}`,
			url.Values{"method": {"cloudflare_challenge"}, "pageurl": {"https://shop.example/"}, "sitekey": {"0x4AAA"}, "htmlPageBase64": {page}, "userAgent": {ua}, "proxy": {"10.1.2.3:8080"}, "proxytype": {"HTTP"}},
			[]string{"cf_clearance", "userAgent"}},
		{"reCAPTCHA Enterprise",
			`{"type":"RecaptchaV2EnterpriseTaskProxyless","websiteURL":"https://shop.example/","websiteKey":"6Le-e","enterprisePayload":{"s":"S-48"},"apiDomain":"recaptcha.net"}`,
			url.Values{"method": {"userrecaptcha"}, "pageurl": {"https://shop.example/"}, "googlekey": {"6Le-e"}, "enterprise": {"1"}, "data-s": {"S-48"}, "domain": {"recaptcha.net"}},
			[]string{"gRecaptchaResponse", "token"}},
		{"grid",
			`{"type":"GridTask","body":"` + pngBody + `","rows":3,"columns":3,"comment":"select all buses"}`,
			url.Values{"method": {"base64"}, "body": {pngBody}, "recaptcha": {"1"}, "recaptcharows": {"3"}, "recaptchacols": {"3"}, "textinstructions": {"select all buses"}},
			[]string{"click"}},
		{"Lemin",
			`{"type":"LeminTaskProxyless","websiteURL":"https://shop.example/","captchaId":"CROPPED_3dfdd5c_d1872b","divId":"lemin-cropped-captcha"}`,
			url.Values{"method": {"lemin"}, "pageurl": {"https://shop.example/"}, "captcha_id": {"CROPPED_3dfdd5c_d1872b"}, "div_id": {"lemin-cropped-captcha"}},
			[]string{"answer", "challenge_id"}},
		{"CaptchaFox",
			`{"type":"CaptchaFoxTask","websiteURL":"https://shop.example/","websiteKey":"sk_fox","userAgent":"` + ua + `",` + proxyCT + `}`,
			url.Values{"method": {"captchafox"}, "pageurl": {"https://shop.example/"}, "sitekey": {"sk_fox"}, "userAgent": {ua}, "proxy": {"10.1.2.3:8080"}, "proxytype": {"HTTP"}},
			[]string{"token", "userAgent"}},
		{"Friendly Captcha",
			`{"type":"FriendlyCaptchaTaskProxyless","websiteURL":"https://shop.example/","websiteKey":"FCMG-48"}`,
			url.Values{"method": {"friendly_captcha"}, "pageurl": {"https://shop.example/"}, "sitekey": {"FCMG-48"}},
			[]string{"token"}},
	}
}

// submit sends tc through front ("createTask" or "in.php") and returns
// the task's id.
func (tc newType) submit(t *testing.T, b *bundle, front string) string {
	t.Helper()
	if front == "createTask" {
		return b.ctCreate(t, keyQA, tc.task)
	}
	return b.inOK(t, keyQA, maps.Clone(tc.in))
}

// check checks a task of tc's answers at every front: getTaskResult's
// solution has the type's fields, res.php json=1 the same answer, and a
// user agent the task was solved for reaches both unchanged.
func (tc newType) check(t *testing.T, a boundAnswers) {
	t.Helper()
	if got := slices.Sorted(maps.Keys(a.sol)); !slices.Equal(got, slices.Sorted(slices.Values(tc.fields))) {
		t.Fatalf("getTaskResult solution %v, want the fields %v", a.sol, tc.fields)
	}
	tok := a.view.Result.Token
	switch tc.name {
	case "cf_clearance":
		var req map[string]any
		raw, _ := json.Marshal(a.res["request"])
		json.Unmarshal(raw, &req)
		if a.sol["cf_clearance"] != tok || req["cf_clearance"] != tok {
			t.Errorf("cf_clearance: /v1/tasks %q, getTaskResult %v, res.php json=1 %v: want one cookie", tok, a.sol, a.res)
		}
	case "grid":
		tiles := strings.ReplaceAll(strings.TrimPrefix(tok, "click:"), "/", ",")
		if got, _ := json.Marshal(a.sol["click"]); a.res["request"] != tok || string(got) != "["+tiles+"]" {
			t.Errorf("grid: res.php json=1 %v, getTaskResult %v, token %q", a.res, a.sol, tok)
		}
	case "Lemin":
		req, _ := a.res["request"].(map[string]any)
		if req["answer"] != a.sol["answer"] || req["challenge_id"] != a.sol["challenge_id"] || a.sol["answer"] == "" {
			t.Errorf("Lemin: res.php json=1 %v, getTaskResult %v", a.res, a.sol)
		}
	default:
		if a.res["request"] != tok || a.sol["token"] != tok {
			t.Errorf("res.php json=1 %v, getTaskResult %v: want the token %s", a.res, a.sol, tok)
		}
	}
	if slices.Contains(tc.fields, "userAgent") {
		if a.sol["userAgent"] != newTypeUA || a.res["useragent"] != newTypeUA || a.view.Bindings == nil || a.view.Bindings.UserAgent != newTypeUA {
			t.Errorf("user agent: getTaskResult %v, res.php json=1 %v, /v1/tasks %+v; want %q at each", a.sol, a.res, a.view.Bindings, newTypeUA)
		}
	} else if a.res["useragent"] != nil {
		t.Errorf("res.php json=1 %v: a user agent the task never had", a.res)
	}
}

// Each type createTask took last (newTypes) is solved through serve for
// an unchanged client of either protocol, from a provider of either
// protocol (newType.check).
func TestNewTypesEveryFront(t *testing.T) {
	t.Parallel()
	for _, createTask := range []bool{false, true} {
		t.Run(fmt.Sprintf("provider createTask %v", createTask), func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{createTask: createTask, methods: createtask.Carried, sim: fastSim})
			for _, tc := range newTypes() {
				for _, front := range []string{"createTask", "in.php"} {
					t.Run(tc.name+"/front "+front, func(t *testing.T) {
						tc.check(t, b.boundAnswers(t, tc.submit(t, b, front)))
					})
				}
			}
		})
	}
}

// pngBody is a 1×1 PNG, base64-encoded.
const pngBody = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
