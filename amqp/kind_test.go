package amqp

import (
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

// The routing key is the kind validation decided: every spelling the
// validation accepts for a kind routes to that kind's lane.
func TestKindOfIsTheValidatedKind(t *testing.T) {
	t.Parallel()
	recaptcha := func(version string) captchaq.Task {
		p := map[string]string{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://a.example/"}
		if version != "" {
			p["version"] = version
		}
		return captchaq.Task{Method: "userrecaptcha", Params: p}
	}
	grid := func(flag string) captchaq.Task {
		return captchaq.Task{Method: "base64", Params: map[string]string{"body": "aGk=", "textinstructions": "buses", "recaptcha": flag}}
	}
	geetest := func(version string) captchaq.Task {
		return captchaq.Task{Method: "geetest", Params: map[string]string{"gt": "g", "challenge": "c", "captcha_id": "i", "pageurl": "https://a.example/", "version": version}}
	}
	for _, tc := range []struct {
		name string
		task captchaq.Task
		want provider.Kind
	}{
		{"reCAPTCHA v3 as v3", recaptcha("v3"), provider.KindRecaptchaV3},
		{"reCAPTCHA v3 as 3", recaptcha("3"), provider.KindRecaptchaV3},
		{"reCAPTCHA v3 as V3", recaptcha("V3"), provider.KindRecaptchaV3},
		{"reCAPTCHA v2 as 2", recaptcha("2"), provider.KindRecaptchaV2},
		{"reCAPTCHA v2 without a version", recaptcha(""), provider.KindRecaptchaV2},
		{"grid as recaptcha=1", grid("1"), provider.KindGrid},
		{"grid as recaptcha=true", grid("true"), provider.KindGrid},
		{"grid as recaptcha=TRUE", grid("TRUE"), provider.KindGrid},
		{"image as recaptcha=0", grid("0"), provider.KindImage},
		{"GeeTest v4 as version=4", geetest("4"), provider.KindGeeTestV4},
		{"Amazon WAF", captchaq.Task{Method: "amazon_waf", Params: map[string]string{"sitekey": "k", "iv": "i", "context": "c", "pageurl": "https://a.example/"}}, provider.KindAmazonWAF},
		{"MTCaptcha as mtcaptcha", captchaq.Task{Method: "mtcaptcha", Params: map[string]string{"sitekey": "MTPublic-k", "pageurl": "https://a.example/"}}, provider.KindMTCaptcha},
		{"DataDome", captchaq.Task{Method: "datadome", Params: map[string]string{"captcha_url": "https://geo.captcha-delivery.com/captcha/", "pageurl": "https://a.example/",
			"userAgent": "UA", "proxy": "1.2.3.4:80", "proxytype": "HTTP"}}, provider.KindDataDome},
	} {
		k, err := tc.task.ProviderTask().KindFor(provider.KnownMethods)
		if err != nil || k != tc.want {
			t.Fatalf("%s: validation decides %q (%v), want %q", tc.name, k, err, tc.want)
		}
		if got := KindOf(tc.task); got != string(tc.want) {
			t.Errorf("%s: routing key %q, want the validated kind %q", tc.name, got, tc.want)
		}
	}
	// What validation cannot place routes by its method, to the default
	// queue unless a lane names it.
	if got := KindOf(captchaq.Task{Method: "newthing"}); got != "newthing" {
		t.Errorf("unknown method: %q", got)
	}
	if got := KindOf(captchaq.Task{}); got != "unknown" {
		t.Errorf("no method: %q", got)
	}
}
