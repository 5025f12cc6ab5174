package createtask

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/captchaq/captchaq/provider"
)

const ddCookie = "datadome=4ZXwCBlyHx9ktZhSnycMF~jt; Max-Age=31536000; Path=/; Secure; SameSite=Lax"

// Each bot-protection type a client sends is the in.php task it stands
// for, and that task is sent to a createTask provider as the same object.
func TestAntibotTaskObjects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, object string
		task         provider.Task
	}{
		{"Amazon WAF", `{"type":"AmazonTaskProxyless","websiteURL":"https://shop.example/","websiteKey":"AQIDAHjc","iv":"CgAHbCe2","context":"qoJYgnKs",` +
			`"challengeScript":"https://x.token.awswaf.com/challenge.js","captchaScript":"https://x.captcha.awswaf.com/captcha.js"}`,
			provider.Task{Method: "amazon_waf", Params: map[string]string{"pageurl": "https://shop.example/", "sitekey": "AQIDAHjc", "iv": "CgAHbCe2", "context": "qoJYgnKs",
				"challenge_script": "https://x.token.awswaf.com/challenge.js", "captcha_script": "https://x.captcha.awswaf.com/captcha.js"}}},
		{"Amazon WAF with a proxy", `{"type":"AmazonTask","websiteURL":"https://shop.example/","websiteKey":"AQIDAHjc","iv":"CgAHbCe2","context":"qoJYgnKs",` +
			`"proxyType":"http","proxyAddress":"10.0.0.1","proxyPort":8080}`,
			provider.Task{Method: "amazon_waf", Params: map[string]string{"pageurl": "https://shop.example/", "sitekey": "AQIDAHjc", "iv": "CgAHbCe2", "context": "qoJYgnKs",
				"proxy": "10.0.0.1:8080", "proxytype": "HTTP"}}},
		{"MTCaptcha", `{"type":"MtCaptchaTaskProxyless","websiteURL":"https://shop.example/signup","websiteKey":"MTPublic-KzqLY1cKH"}`,
			provider.Task{Method: "mt_captcha", Params: map[string]string{"pageurl": "https://shop.example/signup", "sitekey": "MTPublic-KzqLY1cKH"}}},
		{"MTCaptcha with a proxy", `{"type":"MtCaptchaTask","websiteURL":"https://shop.example/signup","websiteKey":"MTPublic-KzqLY1cKH",` +
			`"proxyType":"socks5","proxyAddress":"10.0.0.1","proxyPort":1080,"proxyLogin":"u","proxyPassword":"p"}`,
			provider.Task{Method: "mt_captcha", Params: map[string]string{"pageurl": "https://shop.example/signup", "sitekey": "MTPublic-KzqLY1cKH",
				"proxy": "u:p@10.0.0.1:1080", "proxytype": "SOCKS5"}}},
		{"DataDome slider", `{"type":"DataDomeSliderTask","websiteURL":"https://shop.example/","captchaUrl":"https://geo.captcha-delivery.com/captcha/?initialCid=AHrlq&t=fe",` +
			`"userAgent":"Mozilla/5.0 UA","proxyType":"http","proxyAddress":"10.0.0.1","proxyPort":8080,"proxyLogin":"u","proxyPassword":"p"}`,
			provider.Task{Method: "datadome", Params: map[string]string{"pageurl": "https://shop.example/", "captcha_url": "https://geo.captcha-delivery.com/captcha/?initialCid=AHrlq&t=fe",
				"userAgent": "Mozilla/5.0 UA", "proxy": "u:p@10.0.0.1:8080", "proxytype": "HTTP"}}},
	} {
		got, f := ParseTask([]byte(tc.object))
		if f != nil {
			t.Errorf("%s: ParseTask: %v", tc.name, f)
			continue
		}
		if diff := cmp.Diff(tc.task, got); diff != "" {
			t.Errorf("%s: task (-want +got):\n%s", tc.name, diff)
		}
		if err := got.ValidateFor(Carried); err != nil {
			t.Errorf("%s: ValidateFor(Carried): %v", tc.name, err)
		}
		obj, err := TaskObject(tc.task)
		if err != nil {
			t.Errorf("%s: TaskObject: %v", tc.name, err)
			continue
		}
		b, _ := json.Marshal(obj)
		if !jsonEqual(string(b), tc.object) {
			t.Errorf("%s: sent %s, want %s", tc.name, b, tc.object)
		}
	}
	// A DataDome task without its proxy reads in, and validation names
	// the field and why.
	got, f := ParseTask([]byte(`{"type":"DataDomeSliderTask","websiteURL":"https://shop.example/","captchaUrl":"https://geo.captcha-delivery.com/captcha/?t=fe","userAgent":"UA"}`))
	if f != nil {
		t.Fatal(f)
	}
	const want = "params.proxy: required for datadome; the proxy the answer will be used through, as user:pass@host:port: DataDome binds the cookie to the IP that solved it"
	if err := got.ValidateFor(Carried); err == nil || err.Error() != want {
		t.Errorf("DataDome without a proxy: %v, want %s", err, want)
	}
}

// Each bot-protection kind's solution, as the front answers it from
// either protocol's answer, and as the provider side reads it back: the
// DataDome cookie with the user agent it was solved with, never another.
func TestAntibotSolutions(t *testing.T) {
	t.Parallel()
	waf := json.RawMessage(`{"captcha_voucher":"eyJ0eXAi.v","existing_token":"f8ab5749-b1a1-4f42-9e3b-1d2a0c8c6a1f:AAABk"}`)
	for _, tc := range []struct {
		name   string
		kind   provider.Kind
		token  string
		raw    json.RawMessage
		params map[string]string
		want   string
		back   provider.Answer // what AnswerOf reads from the solution
	}{
		{"Amazon WAF", provider.KindAmazonWAF, string(waf), waf, nil, string(waf),
			provider.Answer{Raw: string(waf), Token: string(waf), JSON: waf}},
		{"MTCaptcha", provider.KindMTCaptcha, "v1(03f1a2,MTPublic-Kz,9d1)", nil, nil, `{"token":"v1(03f1a2,MTPublic-Kz,9d1)"}`,
			provider.Answer{Raw: "v1(03f1a2,MTPublic-Kz,9d1)", Token: "v1(03f1a2,MTPublic-Kz,9d1)"}},
		{"DataDome from res.php with its user agent", provider.KindDataDome, ddCookie,
			json.RawMessage(`{"status":1,"request":"` + ddCookie + `","useragent":"SolvedUA"}`), map[string]string{"userAgent": "SolvedUA"},
			`{"cookie":"` + ddCookie + `","userAgent":"SolvedUA"}`,
			provider.Answer{Raw: `{"cookie":"` + ddCookie + `","userAgent":"SolvedUA"}`, Token: ddCookie, JSON: json.RawMessage(`{"cookie":"` + ddCookie + `","userAgent":"SolvedUA"}`)}},
		{"DataDome polled in bulk: the task's user agent", provider.KindDataDome, ddCookie, nil, map[string]string{"userAgent": "TaskUA"},
			`{"cookie":"` + ddCookie + `","userAgent":"TaskUA"}`,
			provider.Answer{Raw: `{"cookie":"` + ddCookie + `","userAgent":"TaskUA"}`, Token: ddCookie, JSON: json.RawMessage(`{"cookie":"` + ddCookie + `","userAgent":"TaskUA"}`)}},
		{"DataDome from getTaskResult", provider.KindDataDome, ddCookie, json.RawMessage(`{"cookie":"` + ddCookie + `","userAgent":"SolvedUA"}`), nil,
			`{"cookie":"` + ddCookie + `","userAgent":"SolvedUA"}`,
			provider.Answer{Raw: `{"cookie":"` + ddCookie + `","userAgent":"SolvedUA"}`, Token: ddCookie, JSON: json.RawMessage(`{"cookie":"` + ddCookie + `","userAgent":"SolvedUA"}`)}},
	} {
		sol := Solution(tc.kind, tc.token, tc.raw, tc.params)
		b, _ := json.Marshal(sol)
		if !jsonEqual(string(b), tc.want) {
			t.Errorf("%s: solution %s, want %s", tc.name, b, tc.want)
		}
		a, ok := answerOf(b) // as the client reads it: by its fields
		if !ok || a.Token != tc.back.Token || a.Raw != tc.back.Raw && !jsonEqual(a.Raw, tc.back.Raw) || (a.JSON == nil) != (tc.back.JSON == nil) {
			t.Errorf("%s: read back %+v, %v; want %+v", tc.name, a, ok, tc.back)
		}
	}
}
