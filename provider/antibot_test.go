package provider

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// antibotTasks are one valid task of each bot-protection kind, from the
// typed form, with the raw form Task() must produce.
var antibotTasks = []struct {
	kind Kind
	task Task
	want Task
}{
	{KindAmazonWAF, AmazonWAF{SiteKey: "AQIDAHjc", IV: "CgAHbCe2", Context: "qoJYgnKs", PageURL: "https://shop.example/",
		ChallengeScript: "https://x.token.awswaf.com/x/challenge.js", CaptchaScript: "https://x.captcha.awswaf.com/x/captcha.js"}.Task(),
		Task{Method: "amazon_waf", Params: map[string]string{"sitekey": "AQIDAHjc", "iv": "CgAHbCe2", "context": "qoJYgnKs", "pageurl": "https://shop.example/",
			"challenge_script": "https://x.token.awswaf.com/x/challenge.js", "captcha_script": "https://x.captcha.awswaf.com/x/captcha.js"}}},
	{KindMTCaptcha, MTCaptcha{SiteKey: "MTPublic-KzqLY1cKH", PageURL: "https://shop.example/signup"}.Task(),
		Task{Method: "mt_captcha", Params: map[string]string{"sitekey": "MTPublic-KzqLY1cKH", "pageurl": "https://shop.example/signup"}}},
	{KindDataDome, DataDome{CaptchaURL: "https://geo.captcha-delivery.com/captcha/?initialCid=AHrlq&t=fe", PageURL: "https://shop.example/",
		UserAgent: "Mozilla/5.0 UA", Proxy: "u:p@1.2.3.4:8080", ProxyType: "HTTP"}.Task(),
		Task{Method: "datadome", Params: map[string]string{"captcha_url": "https://geo.captcha-delivery.com/captcha/?initialCid=AHrlq&t=fe",
			"pageurl": "https://shop.example/", "userAgent": "Mozilla/5.0 UA", "proxy": "u:p@1.2.3.4:8080", "proxytype": "HTTP"}}},
}

// Each bot-protection kind is taken for a service of the protocol that
// solves it (2captcha's methods) and refused, as unsupported, for
// CaptchaAI; mtcaptcha is another name for mt_captcha.
func TestAntibotTasksAreValid(t *testing.T) {
	t.Parallel()
	for _, tt := range antibotTasks {
		if diff := cmp.Diff(tt.want, tt.task); diff != "" {
			t.Errorf("%s: Task() mismatch (-want +got):\n%s", tt.kind, diff)
		}
		if k, err := tt.task.KindFor(CommonMethods); k != tt.kind || err != nil {
			t.Errorf("%s: KindFor(CommonMethods) = %q, %v", tt.kind, k, err)
		}
		if err := tt.task.ValidateFor(CommonMethods); err != nil {
			t.Errorf("%s: ValidateFor(CommonMethods): %v", tt.kind, err)
		}
		if err := tt.task.Validate(); !errors.Is(err, ErrUnsupportedType) {
			t.Errorf("%s: Validate (CaptchaAI) = %v, want ErrUnsupportedType", tt.kind, err)
		}
	}
	// A provider reads names in any letter case: so does the check.
	lower := maps.Clone(antibotTasks[2].want.Params)
	lower["useragent"] = lower["userAgent"]
	delete(lower, "userAgent")
	if err := (Task{Method: "datadome", Params: lower}).ValidateFor(CommonMethods); err != nil {
		t.Errorf("datadome with useragent: %v", err)
	}
	alias := Task{Method: "mtcaptcha", Params: antibotTasks[1].want.Params}
	if k, err := alias.KindFor(CommonMethods); k != KindMTCaptcha || err != nil || alias.RouteMethod() != "mt_captcha" {
		t.Errorf("mtcaptcha: kind %q, %v, route %q; want mt_captcha", k, err, alias.RouteMethod())
	}
}

// Each field a bot-protection kind requires, left out or blank, and each
// bad value, is refused naming the field and the fix.
func TestAntibotFieldsRefused(t *testing.T) {
	t.Parallel()
	hint := map[string]string{
		"sitekey:" + string(KindAmazonWAF): "key of window.gokuProps in the WAF page",
		"iv":                               "iv of window.gokuProps in the WAF page",
		"context":                          "context of window.gokuProps in the WAF page (it changes on each load)",
		"pageurl":                          "the URL of the page that shows the captcha",
		"sitekey:" + string(KindMTCaptcha): "the MTCaptcha site key (MTPublic-…, sitekey in mtcaptchaConfig)",
		"captcha_url":                      "the captcha iframe's src (https://geo.captcha-delivery.com/captcha/?…)",
		"userAgent":                        "the user agent of the browser that will send the cookie: DataDome binds the cookie to it",
		"proxy":                            "the proxy the answer will be used through, as user:pass@host:port: DataDome binds the cookie to the IP that solved it",
		"proxytype":                        "the proxy's protocol: one of HTTP, HTTPS, SOCKS4, SOCKS5",
	}
	type row struct {
		name string
		task Task
		want string
	}
	var rows []row
	for _, tt := range antibotTasks {
		for _, f := range specs[tt.kind].required {
			h, ok := hint[f.name]
			if !ok {
				h = hint[f.name+":"+string(tt.kind)]
			}
			for _, blank := range []bool{false, true} {
				p := maps.Clone(tt.want.Params)
				delete(p, f.name)
				if blank {
					p[f.name] = " "
				}
				if f.name == "proxy" {
					delete(p, "proxytype") // else proxytype's own rule answers first
					p["proxytype"] = "HTTP"
				}
				rows = append(rows, row{string(tt.kind) + " without " + f.name, Task{Method: tt.want.Method, Params: p},
					"params." + f.name + ": required for " + string(tt.kind) + "; " + h})
			}
		}
	}
	with := func(i int, kv ...string) Task {
		p := maps.Clone(antibotTasks[i].want.Params)
		for j := 0; j+1 < len(kv); j += 2 {
			p[kv[j]] = kv[j+1]
		}
		return Task{Method: antibotTasks[i].want.Method, Params: p}
	}
	rows = append(rows,
		row{"amazon_waf script without scheme", with(0, "captcha_script", "x.captcha.awswaf.com/captcha.js"),
			`params.captcha_script: "x.captcha.awswaf.com/captcha.js" has no scheme; add https:// (e.g. https://x.captcha.awswaf.com/captcha.js)`},
		row{"amazon_waf script without host", with(0, "challenge_script", "https:///challenge.js"),
			`params.challenge_script: "https:///challenge.js" has no host; use the full address, e.g. https://example.com/challenge.js`},
		row{"mt_captcha bad proxy", with(1, "proxy", "u:p@host", "proxytype", "HTTP"),
			`params.proxy: has no port; the proxy the answer will be used through, as user:pass@host:port`},
		row{"datadome banned IP", with(2, "captcha_url", "https://geo.captcha-delivery.com/captcha/?initialCid=AHrlq&t=bv"),
			`params.captcha_url: has t=bv: DataDome has banned the proxy's IP and no solve passes it; use another proxy and send its captcha_url`},
		row{"datadome captcha_url not a URL", with(2, "captcha_url", "ftp://geo.captcha-delivery.com/captcha/"),
			`params.captcha_url: "ftp://geo.captcha-delivery.com/captcha/" must be an http or https URL`},
		row{"datadome proxy with scheme", with(2, "proxy", "http://1.2.3.4:8080"),
			`params.proxy: must not carry a scheme; give user:pass@host:port and put the protocol in proxytype`},
		row{"datadome bad proxytype", with(2, "proxytype", "FTP"),
			`params.proxytype: "FTP" is not a proxy type; use one of HTTP, HTTPS, SOCKS4, SOCKS5`},
	)
	for _, r := range rows {
		err := r.task.ValidateFor(CommonMethods)
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s: ValidateFor = %v, want a *ValidationError", r.name, err)
			continue
		}
		if err.Error() != r.want {
			t.Errorf("%s:\n got %q\nwant %q", r.name, err.Error(), r.want)
		}
	}
}

// A task given under another name of its method (mtcaptcha) is sent
// under the protocol's (mt_captcha): a provider knows only that one.
func TestAliasSentAsTheProtocolsMethod(t *testing.T) {
	t.Parallel()
	sent := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		sent <- r.Form.Get("method")
		w.Write([]byte(`{"status":1,"request":"123"}`))
	}))
	defer srv.Close()
	c, err := NewClient(ClientConfig{BaseURL: srv.URL, Key: "k", Methods: CommonMethods})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(context.Background(), Task{Method: "mtcaptcha", Params: antibotTasks[1].want.Params}, ""); err != nil {
		t.Fatal(err)
	}
	if m := <-sent; m != "mt_captcha" {
		t.Errorf("sent method %q, want mt_captcha", m)
	}
}
