package server_test

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

// wallUA is the browser a DataDome task is solved for.
const wallUA = "Mozilla/5.0 (X11; Linux x86_64) WallBrowser/3.1"

// wallTask is a bot-protection task of the simulator's demo pages, as
// in.php takes it and as createTask does.
type wallTask struct {
	name string
	in   url.Values
	ct   string
}

// wallTasks are the demo pages' tasks, served on the demo host.
func wallTasks() []wallTask {
	const page = "https://demo.example"
	return []wallTask{
		{"Amazon WAF", url.Values{"method": {"amazon_waf"}, "sitekey": {sim.DemoAmazonWAF.SiteKey}, "iv": {sim.DemoAmazonWAFIV},
			"context": {sim.DemoAmazonWAFContext}, "pageurl": {page + sim.DemoAmazonWAF.Path}},
			`{"type":"AmazonTaskProxyless","websiteURL":"` + page + sim.DemoAmazonWAF.Path + `","websiteKey":"` + sim.DemoAmazonWAF.SiteKey +
				`","iv":"` + sim.DemoAmazonWAFIV + `","context":"` + sim.DemoAmazonWAFContext + `"}`},
		{"MTCaptcha", url.Values{"method": {"mt_captcha"}, "sitekey": {sim.DemoMTCaptcha.SiteKey}, "pageurl": {page + sim.DemoMTCaptcha.Path}},
			`{"type":"MtCaptchaTaskProxyless","websiteURL":"` + page + sim.DemoMTCaptcha.Path + `","websiteKey":"` + sim.DemoMTCaptcha.SiteKey + `"}`},
		{"DataDome", url.Values{"method": {"datadome"}, "captcha_url": {sim.DemoDataDome.SiteKey}, "pageurl": {page + sim.DemoDataDome.Path},
			"userAgent": {wallUA}, "proxy": {"u:p@10.0.0.1:8080"}, "proxytype": {"HTTP"}},
			`{"type":"DataDomeSliderTask","websiteURL":"` + page + sim.DemoDataDome.Path + `","captchaUrl":"` + sim.DemoDataDome.SiteKey +
				`","userAgent":"` + wallUA + `","proxyType":"http","proxyAddress":"10.0.0.1","proxyPort":8080,"proxyLogin":"u","proxyPassword":"p"}`},
	}
}

// submit sends tc through front ("createTask" or "in.php") and returns
// the task's id.
func (tc wallTask) submit(t *testing.T, b *bundle, front string) string {
	t.Helper()
	if front == "createTask" {
		return b.ctCreate(t, keyQA, tc.ct)
	}
	return b.inOK(t, keyQA, maps.Clone(tc.in))
}

var wallVerdict = regexp.MustCompile(`id="verdict" data-success="(true|false)">([^<]*)<.*id="error-codes">([^<]*)<`)

// atWall brings what a client got to the simulator's demo page of wall
// (the voucher or token posted in its form, the cookie sent by a browser
// of ua) and returns whether the page let it through, and its codes.
func atWall(t *testing.T, s *sim.Server, name, value, ua string) (bool, string) {
	t.Helper()
	var req *http.Request
	switch name {
	case "Amazon WAF":
		req = httptest.NewRequest(http.MethodPost, "http://demo.example"+sim.DemoAmazonWAF.Path, strings.NewReader(url.Values{"captcha_voucher": {value}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	case "MTCaptcha":
		req = httptest.NewRequest(http.MethodPost, "http://demo.example"+sim.DemoMTCaptcha.Path, strings.NewReader(url.Values{"mtcaptcha-verifiedtoken": {value}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	default:
		req = httptest.NewRequest(http.MethodGet, "http://demo.example"+sim.DemoDataDome.Path, nil)
		req.Header.Set("Cookie", strings.SplitN(value, ";", 2)[0])
		req.Header.Set("User-Agent", ua)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	m := wallVerdict.FindStringSubmatch(strings.ReplaceAll(rec.Body.String(), "\n", " "))
	if m == nil {
		t.Fatalf("%s: no verdict: %s", name, rec.Body)
	}
	return m[1] == "true", m[3]
}

// Amazon WAF, MTCaptcha and DataDome tasks, sent by a client of either
// front and solved by a provider of either protocol, reach the client in
// the service's shape at every front (res.php, getTaskResult, /v1/tasks),
// the DataDome cookie with exactly the user agent it was solved with; and
// what the client gets passes the wall's demo page.
func TestWallTypesThroughEveryFront(t *testing.T) {
	t.Parallel()
	for _, createTask := range []bool{false, true} {
		for _, front := range []string{"in.php", "createTask"} {
			name := front + " front, in.php provider"
			if createTask {
				name = front + " front, createTask provider"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, options{createTask: createTask, methods: provider.CommonMethods, sim: fastSim})
				for _, tc := range wallTasks() {
					tc.check(t, b.sim, b.boundAnswers(t, tc.submit(t, b, front)))
				}
			})
		}
	}
}

// check checks a task of tc's answers: in the service's shape at every
// front (res.php, getTaskResult, /v1/tasks), the DataDome cookie with
// exactly the user agent it was solved with; and what the client gets
// passes the wall's demo page on s.
func (tc wallTask) check(t *testing.T, s *sim.Server, a boundAnswers) {
	t.Helper()
	tok := a.view.Result.Token
	var value string
	switch tc.name {
	case "Amazon WAF":
		req, _ := a.res["request"].(map[string]any)
		value, _ = req["captcha_voucher"].(string)
		if value == "" || req["existing_token"] == nil || a.sol["captcha_voucher"] != value || a.sol["existing_token"] != req["existing_token"] ||
			a.sol["token"] != nil || a.plain != "OK|"+tok {
			t.Errorf("Amazon WAF: res.php %v, getTaskResult %v, plain %q; want {captcha_voucher, existing_token} at each", a.res, a.sol, a.plain)
		}
	case "MTCaptcha":
		value = tok
		if a.res["request"] != tok || a.sol["token"] != tok || len(a.sol) != 1 || a.plain != "OK|"+tok || !strings.HasPrefix(tok, "v1(") {
			t.Errorf("MTCaptcha: res.php %v, getTaskResult %v, plain %q; want the token %s", a.res, a.sol, a.plain, tok)
		}
	default:
		value = tok
		if !strings.HasPrefix(tok, "datadome=") || a.res["request"] != tok || a.sol["cookie"] != tok || a.plain != "OK|"+tok {
			t.Errorf("DataDome: res.php %v, getTaskResult %v, plain %q; want the cookie %s", a.res, a.sol, a.plain, tok)
		}
		if a.res["useragent"] != wallUA || a.sol["userAgent"] != wallUA || a.view.Bindings == nil || a.view.Bindings.UserAgent != wallUA {
			t.Errorf("DataDome: res.php %v, getTaskResult %v, /v1/tasks %+v; want the user agent %q at each", a.res, a.sol, a.view.Bindings, wallUA)
		}
		if ok, codes := atWall(t, s, tc.name, value, "Mozilla/5.0 Other/1"); ok || codes != "user-agent-mismatch" {
			t.Errorf("DataDome cookie from another browser: passed %v (%s), want user-agent-mismatch", ok, codes)
		}
	}
	if ok, codes := atWall(t, s, tc.name, value, wallUA); !ok {
		t.Errorf("%s: the demo page refused %q: %s", tc.name, value, codes)
	}
}
