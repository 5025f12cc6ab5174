package sim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"

	"github.com/captchaq/captchaq/sim"
)

// visit GETs the demo's challenge page with a cf_clearance cookie (none
// when empty) and a user agent: the HTTP status and the #error-codes.
func (b *bundle) visit(t *testing.T, cookie, ua string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.base+sim.DemoChallenge.Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: "cf_clearance", Value: cookie})
	}
	req.Header.Set("User-Agent", ua)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(raw)
	m := regexp.MustCompile(`<span id="error-codes">([^<]*)</span>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("challenge page without #error-codes: %s", body)
	}
	return resp.StatusCode, m[1]
}

// A cf_clearance solved for the demo's challenge page, through either
// protocol, opens the page for the user agent it is bound to, as often as
// asked, and for no other user agent; a cookie it never issued opens
// nothing.
func TestDemoChallengeTakesItsClearance(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Key: key, Instant: true})
	const ua = "Mozilla/5.0 (X11; Linux x86_64) Bound/48"
	page := b.base + sim.DemoChallenge.Path

	var inphp struct {
		Clearance string `json:"cf_clearance"`
		UserAgent string `json:"user_agent"`
	}
	a := b.poll(t, b.submit(t, form("key", key, "method", "cloudflare_challenge", "pageurl", page, "proxy", "10.1.2.3:8080", "proxytype", "HTTP", "userAgent", ua)))
	if err := json.Unmarshal(a.Request, &inphp); err != nil {
		t.Fatalf("res.php answered %s: %v", a.Request, err)
	}
	created := b.ct(t, "createTask", `{"clientKey":"`+key+`","task":{"type":"TurnstileTask","cloudflareTaskType":"cf_clearance","websiteURL":"`+page+
		`","websiteKey":"0x4AAAAAAADemo","htmlPageBase64":"PGh0bWw+","userAgent":"`+ua+`","proxyType":"http","proxyAddress":"10.1.2.3","proxyPort":8080}}`)
	id, _ := created["taskId"].(float64)
	ready := b.ct(t, "getTaskResult", `{"clientKey":"`+key+`","taskId":`+strconv.FormatFloat(id, 'f', 0, 64)+`}`)
	sol, _ := ready["solution"].(map[string]any)
	ctCookie, _ := sol["cf_clearance"].(string)
	ctUA, _ := sol["userAgent"].(string)

	for _, got := range []struct{ via, cookie, ua string }{{"in.php", inphp.Clearance, inphp.UserAgent}, {"createTask", ctCookie, ctUA}} {
		if got.cookie == "" || got.ua != ua {
			t.Fatalf("%s answered cookie %q, user agent %q; want a cookie and %q", got.via, got.cookie, got.ua, ua)
		}
		for range 2 {
			if status, codes := b.visit(t, got.cookie, ua); status != http.StatusOK || codes != "" {
				t.Errorf("%s's cookie with its user agent: %d %q, want 200", got.via, status, codes)
			}
		}
		if status, codes := b.visit(t, got.cookie, "curl/8.5.0"); status != http.StatusForbidden || codes != "user-agent-mismatch" {
			t.Errorf("%s's cookie with another user agent: %d %q, want 403 user-agent-mismatch", got.via, status, codes)
		}
	}
	if status, codes := b.visit(t, "", ua); status != http.StatusForbidden || codes != "missing-cf-clearance" {
		t.Errorf("no cookie: %d %q, want 403 missing-cf-clearance", status, codes)
	}
	if status, codes := b.visit(t, "xourTh-Goq30Bpk-1796679463-1.2.1.1-made-up", ua); status != http.StatusForbidden || codes != "invalid-cf-clearance" {
		t.Errorf("a cookie never issued: %d %q, want 403 invalid-cf-clearance", status, codes)
	}
}

// A reCAPTCHA Enterprise task with its payload and API domain, sent by
// createTask for the demo's checkout page, answers a token the page's
// siteverify takes.
func TestDemoTakesAnEnterpriseToken(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Key: key, Instant: true})
	created := b.ct(t, "createTask", `{"clientKey":"`+key+`","task":{"type":"RecaptchaV2EnterpriseTaskProxyless","websiteURL":"`+b.base+sim.DemoRecaptcha.Path+
		`","websiteKey":"`+sim.DemoRecaptcha.SiteKey+`","enterprisePayload":{"s":"S-48"},"apiDomain":"recaptcha.net"}}`)
	id, _ := created["taskId"].(float64)
	ready := b.ct(t, "getTaskResult", `{"clientKey":"`+key+`","taskId":`+strconv.FormatFloat(id, 'f', 0, 64)+`}`)
	sol, _ := ready["solution"].(map[string]any)
	tok, _ := sol["gRecaptchaResponse"].(string)
	if v := b.verify(t, recaptchaVerify, rcCheck(tok)); !v.Success {
		t.Errorf("siteverify of the Enterprise token %q: %+v (getTaskResult %v)", tok, v, ready)
	}
}

// A CaptchaFox or Friendly Captcha token solved for the demo's sitekey,
// through either protocol, passes its siteverify once; a second check
// answers timeout-or-duplicate, a wrong secret invalid-input-secret.
func TestDemoWidgetTokensVerify(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Key: key, Instant: true})
	const ua = "Mozilla/5.0 (X11; Linux x86_64) Bound/48"
	for _, tc := range []struct {
		site         sim.DemoSite
		method, task string // in.php's method; the createTask task's type and fields
		verify       string
	}{
		{sim.DemoCaptchaFox, "captchafox", `"type":"CaptchaFoxTask","userAgent":"` + ua + `","proxyType":"http","proxyAddress":"10.1.2.3","proxyPort":8080`, "/captchafox/siteverify"},
		{sim.DemoFriendly, "friendly_captcha", `"type":"FriendlyCaptchaTaskProxyless"`, "/friendlycaptcha/api/v1/siteverify"},
	} {
		page := b.base + tc.site.Path
		inphp := b.token(t, form("key", key, "method", tc.method, "sitekey", tc.site.SiteKey, "pageurl", page, "userAgent", ua, "proxy", "10.1.2.3:8080", "proxytype", "HTTP"))
		created := b.ct(t, "createTask", `{"clientKey":"`+key+`","task":{`+tc.task+`,"websiteURL":"`+page+`","websiteKey":"`+tc.site.SiteKey+`"}}`)
		id, _ := created["taskId"].(float64)
		ready := b.ct(t, "getTaskResult", `{"clientKey":"`+key+`","taskId":`+strconv.FormatFloat(id, 'f', 0, 64)+`}`)
		sol, _ := ready["solution"].(map[string]any)
		ct, _ := sol["token"].(string)
		for via, tok := range map[string]string{"in.php": inphp, "createTask": ct} {
			if v := b.verify(t, tc.verify, form("secret", tc.site.Secret, "response", tok)); !v.Success || v.Hostname != "127.0.0.1" {
				t.Errorf("%s %s token %q: %+v, want success for 127.0.0.1", tc.method, via, tok, v)
			}
			wantCodes(t, tc.method+" "+via+" token again", b.verify(t, tc.verify, form("secret", tc.site.Secret, "solution", tok)), "timeout-or-duplicate")
		}
		wantCodes(t, tc.method+" wrong secret", b.verify(t, tc.verify, form("secret", "nope", "response", inphp)), "invalid-input-secret")
	}
}
