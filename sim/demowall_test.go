package sim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// visitDataDome GETs the DataDome page with a datadome cookie (none when
// empty) from a browser of user agent ua: the status, the verdict's title
// and codes, and the body.
func (b *bundle) visitDataDome(t *testing.T, cookie, ua string) (int, string, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.base+sim.DemoDataDome.Path, nil)
	req.Header.Set("User-Agent", ua)
	if cookie != "" {
		name, value, _ := strings.Cut(strings.SplitN(cookie, ";", 2)[0], "=")
		req.AddCookie(&http.Cookie{Name: name, Value: value})
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := verdictRE.FindStringSubmatch(strings.ReplaceAll(string(body), "\n", " "))
	if m == nil {
		return resp.StatusCode, "", "", string(body)
	}
	return resp.StatusCode, m[2], m[3], string(body)
}

// wallAnswers solves the three bot-protection tasks of the demo pages
// through in.php (createTask false) or createTask and returns the Amazon
// WAF voucher, the MTCaptcha token, the DataDome cookie and the user
// agent answered with it.
func (b *bundle) wallAnswers(t *testing.T, createTask bool, ua string) (voucher, token, cookie, cookieUA string) {
	t.Helper()
	waf := form("method", "amazon_waf", "sitekey", sim.DemoAmazonWAF.SiteKey, "iv", sim.DemoAmazonWAFIV,
		"context", sim.DemoAmazonWAFContext, "pageurl", b.base+sim.DemoAmazonWAF.Path)
	mt := form("method", "mt_captcha", "sitekey", sim.DemoMTCaptcha.SiteKey, "pageurl", b.base+sim.DemoMTCaptcha.Path)
	dd := form("method", "datadome", "captcha_url", sim.DemoDataDome.SiteKey, "pageurl", b.base+sim.DemoDataDome.Path,
		"userAgent", ua, "proxy", "u:p@10.0.0.1:8080", "proxytype", "HTTP")
	if !createTask {
		var doc map[string]any
		for _, v := range []url.Values{waf, mt, dd} {
			v.Set("key", key)
			body := b.get(t, "/res.php", form("key", key, "action", "get", "id", b.submit(t, v), "json", "1"))
			if err := json.Unmarshal([]byte(body), &doc); err != nil || doc["status"] != 1.0 {
				t.Fatalf("%s: res.php answered %s", v.Get("method"), body)
			}
			switch v.Get("method") {
			case "amazon_waf":
				voucher, _ = doc["request"].(map[string]any)["captcha_voucher"].(string)
			case "mt_captcha":
				token, _ = doc["request"].(string)
			default:
				cookie, _ = doc["request"].(string)
				cookieUA, _ = doc["useragent"].(string)
			}
		}
		return voucher, token, cookie, cookieUA
	}
	solve := func(task map[string]any) map[string]any {
		body, _ := json.Marshal(map[string]any{"clientKey": key, "task": task})
		m := b.ct(t, "createTask", string(body))
		id, ok := m["taskId"].(float64)
		if !ok {
			t.Fatalf("createTask %s: %v", body, m)
		}
		m = b.ct(t, "getTaskResult", `{"clientKey":"`+key+`","taskId":`+strconv.FormatFloat(id, 'f', -1, 64)+`}`)
		sol, ok := m["solution"].(map[string]any)
		if !ok {
			t.Fatalf("getTaskResult of %s: %v", body, m)
		}
		return sol
	}
	voucher, _ = solve(map[string]any{"type": "AmazonTaskProxyless", "websiteURL": waf.Get("pageurl"), "websiteKey": waf.Get("sitekey"),
		"iv": waf.Get("iv"), "context": waf.Get("context")})["captcha_voucher"].(string)
	token, _ = solve(map[string]any{"type": "MtCaptchaTaskProxyless", "websiteURL": mt.Get("pageurl"), "websiteKey": mt.Get("sitekey")})["token"].(string)
	sol := solve(map[string]any{"type": "DataDomeSliderTask", "websiteURL": dd.Get("pageurl"), "captchaUrl": dd.Get("captcha_url"), "userAgent": ua,
		"proxyType": "http", "proxyAddress": "10.0.0.1", "proxyPort": 8080, "proxyLogin": "u", "proxyPassword": "p"})
	cookie, _ = sol["cookie"].(string)
	cookieUA, _ = sol["userAgent"].(string)
	return voucher, token, cookie, cookieUA
}

// Each bot-protection page passes what the simulator solved for it by
// either protocol, as the site behind the wall would: an Amazon WAF
// voucher and an MTCaptcha token once and within their lifetime, a
// DataDome cookie from the user agent it was solved with only.
func TestDemoWalls(t *testing.T) {
	t.Parallel()
	const ua = "Mozilla/5.0 (X11; Linux x86_64) DemoBrowser/1.0"
	for _, createTask := range []bool{false, true} {
		clock := newManualClock()
		b := setup(t, sim.Config{Instant: true, Now: clock.Now, Methods: provider.KnownMethods})
		for path, want := range map[string]string{
			sim.DemoAmazonWAF.Path: `window.gokuProps = {"key": "` + sim.DemoAmazonWAF.SiteKey + `", "iv": "` + sim.DemoAmazonWAFIV + `"`,
			sim.DemoMTCaptcha.Path: `var mtcaptchaConfig = {"sitekey": "` + sim.DemoMTCaptcha.SiteKey + `"}`,
		} {
			if page := b.get(t, path, nil); !strings.Contains(page, want) {
				t.Fatalf("%s lacks %s:\n%s", path, want, page)
			}
		}
		if status, _, _, page := b.visitDataDome(t, "", ua); status != http.StatusForbidden || !strings.Contains(page, `src="https://geo.captcha-delivery.com/captcha/?initialCid=DemoCaptchaQ`) {
			t.Fatalf("DataDome page without a cookie: %d\n%s", status, page)
		}

		voucher, token, cookie, cookieUA := b.wallAnswers(t, createTask, ua)
		if cookieUA != ua || !strings.HasPrefix(cookie, "datadome=") {
			t.Fatalf("createTask %v: DataDome answered %q with user agent %q, want a datadome cookie with %q", createTask, cookie, cookieUA, ua)
		}
		type outcome struct {
			status       int
			title, codes string
		}
		check := func(what string, want outcome, site sim.DemoSite, field, value string) {
			t.Helper()
			var got outcome
			if site == sim.DemoDataDome {
				got.status, got.title, got.codes, _ = b.visitDataDome(t, value, field)
			} else {
				got.status, got.title, got.codes = b.submitDemo(t, site, field, value)
			}
			if got != want {
				t.Errorf("createTask %v, %s: got %+v, want %+v", createTask, what, got, want)
			}
		}
		check("MTCaptcha token at the Amazon WAF page", outcome{403, "Rejected", "invalid-input-response"}, sim.DemoAmazonWAF, "captcha_voucher", token)
		check("Amazon WAF voucher", outcome{200, "Access granted", ""}, sim.DemoAmazonWAF, "captcha_voucher", voucher)
		check("Amazon WAF voucher again", outcome{403, "Rejected", "timeout-or-duplicate"}, sim.DemoAmazonWAF, "captcha_voucher", voucher)
		check("MTCaptcha without a token", outcome{403, "Rejected", "missing-input-response"}, sim.DemoMTCaptcha, "mtcaptcha-verifiedtoken", "")
		check("DataDome cookie from another browser", outcome{403, "Rejected", "user-agent-mismatch"}, sim.DemoDataDome, "Mozilla/5.0 Other/2", cookie)
		check("DataDome cookie", outcome{200, "Welcome", ""}, sim.DemoDataDome, ua, cookie)
		check("DataDome cookie again", outcome{200, "Welcome", ""}, sim.DemoDataDome, ua, cookie)
		clock.Advance(121 * time.Second)
		check("MTCaptcha token after 121 s", outcome{403, "Rejected", "timeout-or-duplicate"}, sim.DemoMTCaptcha, "mtcaptcha-verifiedtoken", token)
		_, token, _, _ = b.wallAnswers(t, createTask, ua)
		check("MTCaptcha token", outcome{200, "Account created", ""}, sim.DemoMTCaptcha, "mtcaptcha-verifiedtoken", token)
	}
}

// The simulator refuses a bot-protection task without what its wall
// needs, as the service does, at both protocols.
func TestWallTasksRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Instant: true, Methods: provider.KnownMethods})
	for _, tc := range []struct {
		v    url.Values
		text string
	}{
		{form("method", "amazon_waf", "sitekey", "k", "context", "c", "pageurl", "https://shop.example/"), "iv is missing or empty."},
		{form("method", "mt_captcha", "pageurl", "https://shop.example/"), "sitekey is missing or empty."},
		{form("method", "datadome", "captcha_url", "https://geo.captcha-delivery.com/captcha/", "pageurl", "https://shop.example/", "proxy", "1.2.3.4:80", "proxytype", "HTTP"),
			"useragent is missing or empty."},
		{form("method", "datadome", "captcha_url", "https://geo.captcha-delivery.com/captcha/", "pageurl", "https://shop.example/", "userAgent", "UA"),
			"proxy is missing or empty."},
	} {
		tc.v.Set("key", key)
		tc.v.Set("json", "1")
		a := decode(t, b.post(t, "/in.php", tc.v))
		if a.Status != 0 || a.str(t) != "ERROR_BAD_PARAMETERS" || a.ErrorText != tc.text {
			t.Errorf("%s %v: %+v, want ERROR_BAD_PARAMETERS: %s", tc.v.Get("method"), tc.v, a, tc.text)
		}
	}
	m := b.ct(t, "createTask", `{"clientKey":"`+key+`","task":{"type":"DataDomeSliderTask","websiteURL":"https://shop.example/",`+
		`"captchaUrl":"https://geo.captcha-delivery.com/captcha/","userAgent":"UA"}}`)
	if m["errorCode"] != "ERROR_BAD_PARAMETERS" || m["errorDescription"] != "proxy is missing or empty." {
		t.Errorf("DataDomeSliderTask without a proxy: %v", m)
	}
}
