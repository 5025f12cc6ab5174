package provider

import (
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// goodTasks is one valid task of every kind, from the typed form.
var goodTasks = []struct {
	kind Kind
	task Task
	want Task // the raw form Task() must produce
}{
	{KindRecaptchaV2, RecaptchaV2{SiteKey: "6Le-site", PageURL: "https://shop.example/login", Invisible: true, Enterprise: true, DataS: "ds", Domain: "recaptcha.net", UserAgent: "UA", Cookies: "a=b", Proxy: "u:p@1.2.3.4:8080", ProxyType: "HTTP"}.Task(),
		Task{Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-site", "pageurl": "https://shop.example/login", "invisible": "1", "enterprise": "1", "data-s": "ds", "domain": "recaptcha.net", "userAgent": "UA", "cookies": "a=b", "proxy": "u:p@1.2.3.4:8080", "proxytype": "HTTP"}}},
	{KindRecaptchaV3, RecaptchaV3{SiteKey: "6Le-v3", PageURL: "https://shop.example/", Action: "login", MinScore: 0.3}.Task(),
		Task{Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-v3", "pageurl": "https://shop.example/", "version": "v3", "action": "login", "min_score": "0.3"}}},
	{KindTurnstile, Turnstile{SiteKey: "0x4AAA", PageURL: "https://shop.example/checkout", Action: "pay", Data: "cd", PageData: "pd", UserAgent: "UA"}.Task(),
		Task{Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "https://shop.example/checkout", "action": "pay", "data": "cd", "pagedata": "pd", "userAgent": "UA"}}},
	{KindCloudflareChallenge, CloudflareChallenge{PageURL: "https://shop.example/", Proxy: "u:p@proxy.example:3128", ProxyType: "HTTPS", UserAgent: "UA"}.Task(),
		Task{Method: "cloudflare_challenge", Params: map[string]string{"pageurl": "https://shop.example/", "proxy": "u:p@proxy.example:3128", "proxytype": "HTTPS", "userAgent": "UA"}}},
	{KindCloudflareChallenge, CloudflareChallenge{PageURL: "https://shop.example/", Proxy: "proxy.example:3128", ProxyType: "HTTP", UserAgent: "UA", SiteKey: "0x4AAA", HTMLPage: []byte("<html>")}.Task(),
		Task{Method: "cloudflare_challenge", Params: map[string]string{"pageurl": "https://shop.example/", "proxy": "proxy.example:3128", "proxytype": "HTTP", "userAgent": "UA", "sitekey": "0x4AAA", "htmlPageBase64": "PGh0bWw+"}}},
	{KindGeeTest, GeeTest{GT: "gt1", Challenge: "ch1", PageURL: "https://shop.example/", APIServer: "api-na.geetest.com"}.Task(),
		Task{Method: "geetest", Params: map[string]string{"gt": "gt1", "challenge": "ch1", "pageurl": "https://shop.example/", "api_server": "api-na.geetest.com"}}},
	{KindImage, Image{Body: []byte("GIF89a"), Phrase: true, RegSense: true, Numeric: 1, Calc: true, MinLen: 4, MaxLen: 6, Lang: "en", TextInstructions: "type the letters"}.Task(),
		Task{Method: "base64", Params: map[string]string{"body": "R0lGODlh", "phrase": "1", "regsense": "1", "numeric": "1", "calc": "1", "min_len": "4", "max_len": "6", "lang": "en", "textinstructions": "type the letters"}}},
	{KindImage, Task{Method: "post", Params: map[string]string{"file": "R0lGODlh"}},
		Task{Method: "post", Params: map[string]string{"file": "R0lGODlh"}}},
	{KindGrid, Grid{Body: []byte("GIF89a"), TextInstructions: "select all buses", Rows: 4, Cols: 4}.Task(),
		Task{Method: "base64", Params: map[string]string{"body": "R0lGODlh", "recaptcha": "1", "textinstructions": "select all buses", "recaptcharows": "4", "recaptchacols": "4"}}},
	{KindBLS, BLS{Instructions: "664", Images: [][]byte{[]byte("GIF89a"), []byte("GIF89a")}}.Task(),
		Task{Method: "bls", Params: map[string]string{"instructions": "664", "image_base64_1": "data:image/gif;base64,R0lGODlh", "image_base64_2": "data:image/gif;base64,R0lGODlh"}}},
	{KindCaptchaFox, CaptchaFox{SiteKey: "sk-fox", PageURL: "https://shop.example/", APIServer: "api.captchafox.com", UserAgent: "UA"}.Task(),
		Task{Method: "captchafox", Params: map[string]string{"sitekey": "sk-fox", "pageurl": "https://shop.example/", "api_server": "api.captchafox.com", "userAgent": "UA"}}},
	{KindFriendlyCaptcha, FriendlyCaptcha{SiteKey: "FCMG", PageURL: "http://shop.example:8080/x"}.Task(),
		Task{Method: "friendly_captcha", Params: map[string]string{"sitekey": "FCMG", "pageurl": "http://shop.example:8080/x"}}},
	{KindLemin, Lemin{CaptchaID: "CROPPED_1", PageURL: "https://shop.example/", DivID: "lemin-div", APIServer: "api.leminnow.com"}.Task(),
		Task{Method: "lemin", Params: map[string]string{"captcha_id": "CROPPED_1", "pageurl": "https://shop.example/", "div_id": "lemin-div", "api_server": "api.leminnow.com"}}},
}

func TestTypedTasksAreValid(t *testing.T) {
	t.Parallel()
	for _, tt := range goodTasks {
		t.Run(string(tt.kind)+"/"+tt.task.Method, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, tt.task); diff != "" {
				t.Fatalf("Task() mismatch (-want +got):\n%s", diff)
			}
			if err := tt.task.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			k, err := tt.task.Kind()
			if err != nil || k != tt.kind {
				t.Fatalf("Kind = %q, %v; want %q", k, err, tt.kind)
			}
		})
	}
}

// TestMissingRequiredFields removes each required field of each good task in
// turn and expects the exact message naming that field.
func TestMissingRequiredFields(t *testing.T) {
	t.Parallel()
	hints := map[string]string{
		"googlekey":        "the reCAPTCHA site key (data-sitekey in the page)",
		"sitekey":          "the widget's site key (data-sitekey in the page)",
		"pageurl":          "the URL of the page that shows the captcha",
		"proxy":            "the proxy the answer will be used through, as user:pass@host:port",
		"proxytype":        "the proxy's protocol: one of HTTP, HTTPS, SOCKS4, SOCKS5",
		"gt":               "the GeeTest gt value from the page",
		"challenge":        "a fresh GeeTest challenge value from the page (it expires quickly)",
		"textinstructions": `what to select, e.g. "select all images with a bus", or imginstructions: an image of it, base64-encoded`,
		"instructions":     "the numeric code shown above the grid, e.g. 664",
		"image_base64_1":   "the first grid image as base64 (image_base64_1 … image_base64_9, in reading order)",
		"captcha_id":       "the Lemin captcha id from the page",
	}
	required := map[Kind][]string{
		KindRecaptchaV2:         {"googlekey", "pageurl"},
		KindRecaptchaV3:         {"googlekey", "pageurl"},
		KindTurnstile:           {"sitekey", "pageurl"},
		KindCloudflareChallenge: {"pageurl", "proxy", "proxytype"},
		KindGeeTest:             {"gt", "challenge", "pageurl"},
		KindGrid:                {"textinstructions"},
		KindBLS:                 {"instructions", "image_base64_1"},
		KindCaptchaFox:          {"sitekey", "pageurl"},
		KindFriendlyCaptcha:     {"sitekey", "pageurl"},
		KindLemin:               {"captcha_id", "pageurl"},
	}
	for _, tt := range goodTasks {
		for _, f := range required[tt.kind] {
			for _, blank := range []bool{false, true} {
				name := string(tt.kind) + "/" + f
				if blank {
					name += "/blank"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					task := Task{Method: tt.task.Method, Params: maps.Clone(tt.task.Params)}
					if blank {
						task.Params[f] = "  "
					} else {
						delete(task.Params, f)
					}
					if f == "proxy" {
						delete(task.Params, "proxytype") // else proxytype's own rule fires first
						if tt.kind == KindCloudflareChallenge {
							task.Params["proxytype"] = "HTTP"
						}
					}
					err := task.Validate()
					var ve *ValidationError
					if !errors.As(err, &ve) {
						t.Fatalf("Validate = %v, want *ValidationError", err)
					}
					want := "params." + f + ": required for " + string(tt.kind) + "; " + hints[f]
					if err.Error() != want {
						t.Errorf("message\n got %q\nwant %q", err.Error(), want)
					}
					if !errors.Is(err, ErrInvalidTask) || errors.Is(err, ErrUnsupportedType) {
						t.Errorf("errors.Is(ErrInvalidTask) false or matched ErrUnsupportedType")
					}
				})
			}
		}
	}
}

func TestValidateBadValues(t *testing.T) {
	t.Parallel()
	v2 := func(kv ...string) Task {
		p := map[string]string{"googlekey": "k", "pageurl": "https://shop.example/"}
		for i := 0; i+1 < len(kv); i += 2 {
			p[kv[i]] = kv[i+1]
		}
		return Task{Method: "userrecaptcha", Params: p}
	}
	tests := []struct {
		name string
		task Task
		want string
	}{
		{"no scheme", v2("pageurl", "shop.example/login"), `params.pageurl: "shop.example/login" has no scheme; add https:// (e.g. https://shop.example/login)`},
		{"no scheme with port", v2("pageurl", "shop.example:8080/login"), `params.pageurl: "shop.example:8080/login" has no scheme; add https:// (e.g. https://shop.example:8080/login)`},
		{"scheme-relative", v2("pageurl", "//shop.example/x"), `params.pageurl: "//shop.example/x" has no scheme; add https:// (e.g. https://shop.example/x)`},
		{"ftp", v2("pageurl", "ftp://shop.example/x"), `params.pageurl: "ftp://shop.example/x" must be an http or https URL`},
		{"no host", v2("pageurl", "https:///x"), `params.pageurl: "https:///x" has no host; use the full address, e.g. https://example.com/login`},
		{"bad proxytype", v2("proxy", "u:p@h:1", "proxytype", "SOCKS6"), `params.proxytype: "SOCKS6" is not a proxy type; use one of HTTP, HTTPS, SOCKS4, SOCKS5`},
		{"proxytype without proxy", v2("proxytype", "HTTP"), `params.proxy: required when proxytype is set; the proxy the answer will be used through, as user:pass@host:port`},
		{"proxy without port", v2("proxy", "u:p@host"), `params.proxy: has no port; the proxy the answer will be used through, as user:pass@host:port`},
		{"proxy with scheme", v2("proxy", "http://host:1"), `params.proxy: must not carry a scheme; give user:pass@host:port and put the protocol in proxytype`},
		{"bad flag", v2("invisible", "yes"), `params.invisible: "yes" is not 0 or 1`},
		{"bad version", v2("version", "v5"), `params.version: "v5" is not a reCAPTCHA version; use v3 for reCAPTCHA v3, or leave it out for v2`},
		{"bad min_score", Task{Method: "userrecaptcha", Params: map[string]string{"googlekey": "k", "pageurl": "https://a.example/", "version": "v3", "min_score": "3"}},
			`params.min_score: "3" is not a score between 0.1 and 0.9 (0.3 is realistic)`},
		{"bad base64", Task{Method: "base64", Params: map[string]string{"body": "not base64!!"}},
			`params.body: not valid base64 (bad base64 data); send the image bytes base64-encoded`},
		{"empty body", Task{Method: "base64", Params: map[string]string{}}, `params.body: required for method base64; the image encoded as base64`},
		{"post without file", Task{Method: "post", Params: map[string]string{"numeric": "1"}}, `params.file: required for method post; the image's bytes, base64-encoded (the command line reads a local path at intake)`},
		{"bad numeric", Task{Method: "base64", Params: map[string]string{"body": "R0lGODlh", "numeric": "7"}}, `params.numeric: "7" is not a whole number from 0 to 4`},
		{"empty method", Task{}, `method: required; one of base64, bls, captchafox, cloudflare_challenge, friendly_captcha, geetest, lemin, post, turnstile, userrecaptcha`},
		{"unknown method", Task{Method: "recaptcha"}, `method: unknown method "recaptcha"; supported: base64, bls, captchafox, cloudflare_challenge, friendly_captcha, geetest, lemin, post, turnstile, userrecaptcha`},
		{"upper case method", Task{Method: "Turnstile"}, `method: "Turnstile" must be written in lower case: "turnstile"`},
		{"reCAPTCHA API domain not Google's", v2("enterprise", "1", "domain", "recaptcha.example"),
			`params.domain: "recaptcha.example" is not a domain reCAPTCHA loads from; use google.com or recaptcha.net (createTask's apiDomain)`},
		{"reCAPTCHA v3 API domain with a scheme", Task{Method: "userrecaptcha", Params: map[string]string{"googlekey": "k", "pageurl": "https://a.example/", "version": "v3", "domain": "https://google.com"}},
			`params.domain: "https://google.com" is not a domain reCAPTCHA loads from; use google.com or recaptcha.net (createTask's apiDomain)`},
		{"cf challenge page not base64", Task{Method: "cloudflare_challenge", Params: map[string]string{"pageurl": "https://a.example/", "proxy": "h:1", "proxytype": "HTTP", "htmlPageBase64": "<html>"}},
			`params.htmlPageBase64: not valid base64; send the challenge page's HTML base64-encoded (createTask's htmlPageBase64)`},
		{"grid with neither instruction", Task{Method: "base64", Params: map[string]string{"body": "R0lGODlh", "recaptcha": "1"}},
			`params.textinstructions: required for grid; what to select, e.g. "select all images with a bus", or imginstructions: an image of it, base64-encoded`},
		{"cf challenge without proxytype", Task{Method: "cloudflare_challenge", Params: map[string]string{"pageurl": "https://a.example/", "proxy": "h:1"}},
			`params.proxytype: required for cloudflare_challenge; the proxy's protocol: one of HTTP, HTTPS, SOCKS4, SOCKS5`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.task.Validate()
			if err == nil {
				t.Fatal("Validate = nil")
			}
			if err.Error() != tt.want {
				t.Errorf("message\n got %q\nwant %q", err.Error(), tt.want)
			}
			if !errors.Is(err, ErrInvalidTask) {
				t.Errorf("not ErrInvalidTask: %v", err)
			}
		})
	}
}

func TestValidateAcceptsLenientValues(t *testing.T) {
	t.Parallel()
	for _, task := range []Task{
		{Method: "userrecaptcha", Params: map[string]string{"googlekey": "k", "pageurl": "HTTPS://Shop.Example/x?a=1", "invisible": "true", "proxy": "h:1", "proxytype": "socks5"}},
		{Method: "base64", Params: map[string]string{"body": "data:image/gif;base64,R0lGODlh"}},
		{Method: "base64", Params: map[string]string{"body": "R0lG\nODlh"}},
		{Method: "base64", Params: map[string]string{"body": "R0lGODk"}}, // unpadded
		{Method: "base64", Params: map[string]string{"body": "R0lGODlh", "recaptcha": "0"}},
		{Method: "geetest", Params: map[string]string{"gt": "g", "challenge": "c", "pageurl": "https://a.example/", "version": "3"}},
		{Method: "userrecaptcha", Params: map[string]string{"googlekey": "k", "pageurl": "https://a.example/", "enterprise": "1", "data-s": "S", "domain": "Recaptcha.NET"}},
		Grid{Body: []byte("GIF89a"), ImgInstructions: []byte("GIF89a")}.Task(), // instructions as an image alone
	} {
		if err := task.Validate(); err != nil {
			t.Errorf("%v: %v", task, err)
		}
	}
}

func TestUnsupportedTypes(t *testing.T) {
	t.Parallel()
	const supported = "; supported methods: base64, bls, captchafox, cloudflare_challenge, friendly_captcha, geetest, lemin, post, turnstile, userrecaptcha"
	tests := []struct {
		task Task
		want string
	}{
		{Task{Method: "hcaptcha", Params: map[string]string{"sitekey": "s", "pageurl": "https://a.example/"}},
			`unsupported captcha type hCaptcha (method "hcaptcha"): the provider does not support it` + supported},
		{Task{Method: "funcaptcha"}, `unsupported captcha type FunCaptcha (Arkose Labs) (method "funcaptcha"): the provider does not support it` + supported},
		{Task{Method: "arkose"}, `unsupported captcha type FunCaptcha (Arkose Labs) (method "arkose"): the provider does not support it` + supported},
		{Task{Method: "HCaptcha"}, `unsupported captcha type hCaptcha (method "HCaptcha"): the provider does not support it` + supported},
		{Task{Method: "geetest_v4"}, `unsupported captcha type GeeTest v4 (method "geetest_v4"): the provider does not support it` + supported},
		{Task{Method: "geetest", Params: map[string]string{"gt": "g", "pageurl": "https://a.example/", "version": "4"}},
			`unsupported captcha type GeeTest v4 (method "geetest version=4"): the provider does not support it` + supported},
	}
	for _, tt := range tests {
		t.Run(tt.task.Method, func(t *testing.T) {
			t.Parallel()
			for _, err := range []error{tt.task.Validate(), func() error { _, err := tt.task.Kind(); return err }()} {
				if !errors.Is(err, ErrUnsupportedType) {
					t.Fatalf("err = %v, want ErrUnsupportedType", err)
				}
				if got, want := err.Error(), "validate: "+tt.want; got != want {
					t.Errorf("message\n got %q\nwant %q", got, want)
				}
				if ClassOf(err) != ClassTask {
					t.Errorf("class %v", ClassOf(err))
				}
			}
		})
	}
}

// A post task's file is the image's bytes: a path (existing or not) is
// never opened, and the error is the same whether it exists or not.
func TestPostFileIsNeverAPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	real := filepath.Join(dir, "real.png")
	if err := os.WriteFile(real, []byte("GIF89a"), 0o600); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, path := range []string{"/etc/hostname", "/dev/zero", real, filepath.Join(dir, "missing.png")} {
		err := Task{Method: "post", Params: map[string]string{"file": path}}.Validate()
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != "params.file" {
			t.Fatalf("%s: %v", path, err)
		}
		if strings.Contains(err.Error(), path) {
			t.Errorf("%s: the error names the path: %v", path, err)
		}
		msgs = append(msgs, err.Error())
	}
	for _, m := range msgs[1:] {
		if m != msgs[0] {
			t.Errorf("errors differ by path: %q vs %q", m, msgs[0])
		}
	}
}

func TestReservedParamsInAnyCase(t *testing.T) {
	t.Parallel()
	base := map[string]string{"sitekey": "s", "pageurl": "https://a.example/"}
	for _, name := range []string{"key", "Key", "KEY", "method", "Json", "pingback", "PingBack", "soft_id", "SOFT_ID", "header_acao", " key"} {
		p := maps.Clone(base)
		p[name] = "x"
		err := Task{Method: "turnstile", Params: p}.Validate()
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != "params."+name || !strings.Contains(ve.Reason, "reserved in any letter case") {
			t.Errorf("%q: %v", name, err)
		}
	}
	p := maps.Clone(base)
	p["action"] = "login" // a task field (Turnstile, reCAPTCHA v3), not res.php's
	if err := (Task{Method: "turnstile", Params: p}).Validate(); err != nil {
		t.Errorf("action: %v", err)
	}
	var ve *ValidationError
	err := Task{Method: "base64", Params: map[string]string{"body": "R0lGODlh", "BODY": "R0lGODlh"}}.Validate()
	if err == nil || !strings.Contains(err.Error(), `write "BODY" in lower case`) {
		t.Errorf("BODY: %v", err)
	}
	p = maps.Clone(base)
	p["PageURL"] = "not a url"
	err = Task{Method: "turnstile", Params: p}.Validate()
	if !errors.As(err, &ve) || ve.Field != "params.pageurl" || !strings.Contains(ve.Reason, `"PageURL" and "pageurl" name one field`) {
		t.Errorf("pageurl in two cases: %v", err)
	}
}

func TestImageCappedAtProviderLimit(t *testing.T) {
	t.Parallel()
	ok := base64.StdEncoding.EncodeToString(make([]byte, MaxImageBytes))
	big := base64.StdEncoding.EncodeToString(make([]byte, MaxImageBytes+1))
	if err := (Task{Method: "base64", Params: map[string]string{"body": ok}}).Validate(); err != nil {
		t.Errorf("at the limit: %v", err)
	}
	for _, tk := range []Task{
		{Method: "base64", Params: map[string]string{"body": big}},
		{Method: "post", Params: map[string]string{"file": big}},
		{Method: "bls", Params: map[string]string{"instructions": "664", "image_base64_1": big}},
	} {
		err := tk.Validate()
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("the image is %d bytes; the provider takes at most %d", MaxImageBytes+1, MaxImageBytes)) {
			t.Errorf("%s: %v", tk.Method, err)
		}
	}
}

func TestReadImageFileCapped(t *testing.T) {
	t.Parallel()
	if _, err := ReadImageFile("/dev/zero"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("/dev/zero: %v", err)
	}
	p := filepath.Join(t.TempDir(), "big.png")
	if err := os.WriteFile(p, make([]byte, MaxImageBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadImageFile(p); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("big: %v", err)
	}
}

func TestValidateForOtherServices(t *testing.T) {
	t.Parallel()
	hc := Task{Method: "hcaptcha", Params: map[string]string{"sitekey": "s", "pageurl": "https://a.example/"}}
	if err := hc.ValidateFor(CommonMethods); err != nil {
		t.Fatalf("hcaptcha for a common provider: %v", err)
	}
	if k, err := hc.KindFor(CommonMethods); k != KindHCaptcha || err != nil {
		t.Fatalf("KindFor = %q, %v", k, err)
	}
	err := Task{Method: "hcaptcha", Params: map[string]string{"pageurl": "https://a.example/"}}.ValidateFor(CommonMethods)
	if err == nil || err.Error() != "params.sitekey: required for hcaptcha; the widget's site key (data-sitekey in the page)" {
		t.Fatalf("missing sitekey: %v", err)
	}
	err = Task{Method: "lemin", Params: map[string]string{"captcha_id": "c", "pageurl": "https://a.example/"}}.ValidateFor([]string{"hcaptcha"})
	if err == nil || err.Error() != `validate: unsupported captcha type Lemin (method "lemin"): the provider does not support it; supported methods: hcaptcha` {
		t.Fatalf("lemin for an hcaptcha-only provider: %v", err)
	}
	gt4 := Task{Method: "geetest", Params: map[string]string{"version": "4", "captcha_id": "c", "pageurl": "https://a.example/"}}
	if gt4.RouteMethod() != "geetest_v4" || gt4.ValidateFor(CommonMethods) != nil {
		t.Fatalf("geetest version 4: route %q, %v", gt4.RouteMethod(), gt4.ValidateFor(CommonMethods))
	}
	if got := (Task{Method: "Arkose"}).RouteMethod(); got != "funcaptcha" {
		t.Fatalf("RouteMethod(Arkose) = %q", got)
	}
}

// An image over the provider's limit is refused from its base64 length,
// with its decoded size, before it is decoded: a 6 MiB body (4.5 MiB of
// image) allocated 4.5 MiB to be refused, and costs a few hundred bytes.
// Not parallel: the bytes allocated are counted process-wide.
func TestOversizeImageRefusedBeforeDecoding(t *testing.T) {
	image := make([]byte, 6<<20/4*3)
	for i := range image {
		image[i] = byte(i * 7)
	}
	tests := []struct {
		name string
		task Task
		want string
	}{
		{"base64 body", Task{Method: "base64", Params: map[string]string{"body": base64.StdEncoding.EncodeToString(image)}},
			"params.body: the image is 4718592 bytes; the provider takes at most 614400 (600 KiB): scale it down or crop it"},
		{"data: URI with line breaks, unpadded", Task{Method: "base64", Params: map[string]string{"body": "data:image/png;base64," +
			strings.ReplaceAll(base64.RawStdEncoding.EncodeToString(image[:614401]), "A", "A\r\n")}},
			"params.body: the image is 614401 bytes; the provider takes at most 614400 (600 KiB): scale it down or crop it"},
		{"bls grid image", Task{Method: "bls", Params: map[string]string{"instructions": "664",
			"image_base64_1": base64.StdEncoding.EncodeToString(image)}},
			"params.image_base64_1: the image is 4718592 bytes; the provider takes at most 614400 (600 KiB)"},
	}
	for _, tc := range tests {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err := tc.task.Validate()
		runtime.ReadMemStats(&after)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<10 {
			t.Errorf("%s: %d bytes allocated to refuse it, want under 64 KiB", tc.name, alloc)
		}
	}
}

// A provider that parses forms as PHP does reads ' ', '.' and an
// unclosed '[' as '_', stops a name at NUL and makes name[i] an array of
// name: every spelling of a reserved name it would read as one is refused.
func TestFoldParamName(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"soft_id", "soft_id"},
		{"soft.id", "soft_id"},
		{"Soft.ID", "soft_id"},
		{"header acao", "header_acao"},
		{"header.acao", "header_acao"},
		{"pingback\x00", "pingback"},
		{"pingback\x00.evil", "pingback"},
		{" key", "key"},
		{"key ", "key"},
		{"  key\t", "key"},
		{"header[acao", "header_acao"},
		{"header[acao.x", "header_acao.x"}, // folding ends at the first '['
		{"pingback[]", "pingback[]"},
		{"data[blob]", "data[blob]"},
		{"a.b[c.d]", "a_b[c.d]"},
		{"pageurl", "pageurl"},
		{"data-s", "data-s"},
	} {
		if got := FoldParamName(c.in); got != c.want {
			t.Errorf("FoldParamName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, c := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"soft.id", "soft_id", true},
		{"header acao", "header_acao", true},
		{"pingback\x00", "pingback", true},
		{"pingback[]", "pingback", true},
		{"JSON[x]", "json", true},
		{"method[", "method_", false},
		{"key_", "key_", false},
		{"action", "action", false},
		{"data[blob]", "data", false},
	} {
		if got, ok := IsReservedParam(c.in); got != c.want || ok != c.ok {
			t.Errorf("IsReservedParam(%q) = %q, %v, want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// The params of the issue, one at a time and together: each is refused
// naming the param as given (a NUL quoted), never passed on.
func TestReservedParamsInEveryFoldedForm(t *testing.T) {
	t.Parallel()
	base := map[string]string{"sitekey": "s", "pageurl": "https://a.example/"}
	for _, c := range []struct{ name, field, reads string }{
		{"soft.id", "params.soft.id", `"soft.id" as "soft_id"`},
		{"header acao", "params.header acao", `"header acao" as "header_acao"`},
		{"pingback\x00", `params."pingback\x00"`, `"pingback\x00" as "pingback"`},
		{"pingback[]", "params.pingback[]", `"pingback[]" as "pingback"`},
		{"key ", "params.key ", `"key " as "key"`},
		{"Method.", "", ""}, // "method_": not reserved
	} {
		p := maps.Clone(base)
		p[c.name] = "x"
		err := Task{Method: "turnstile", Params: p}.Validate()
		if c.field == "" {
			if err != nil {
				t.Errorf("%q: %v, want it taken", c.name, err)
			}
			continue
		}
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != c.field || !strings.Contains(ve.Reason, "a provider reads "+c.reads) ||
			ve.ProtocolCode() != "ERROR_BAD_PARAMETERS" {
			t.Errorf("%q: %v, want field %s reading %s", c.name, err, c.field, c.reads)
		}
	}
	p := maps.Clone(base)
	p["soft.id"], p["header acao"], p["pingback\x00"] = "4242", "1", "https://attacker.example/cb"
	var ve *ValidationError
	if err := (Task{Method: "turnstile", Params: p}).Validate(); !errors.As(err, &ve) || ve.Field != "params.header acao" {
		t.Errorf("the three params: %v, want the first by name (params.header acao) refused", err)
	}
	for _, pair := range [][2]string{{"page.url", "page_url"}, {"data", "data[blob]"}, {"Data[blob]", "data"}, {"lang", " lang"}} {
		p := maps.Clone(base)
		p[pair[0]], p[pair[1]] = "a", "b"
		err := Task{Method: "turnstile", Params: p}.Validate()
		if !errors.As(err, &ve) || !strings.Contains(ve.Reason, "name one field") {
			t.Errorf("%q beside %q: %v, want them refused as one field", pair[0], pair[1], err)
		}
	}
	p = map[string]string{"body ": "R0lGODlh"}
	if err := (Task{Method: "base64", Params: p}).Validate(); err == nil || !strings.Contains(err.Error(), `write "body " in lower case, with nothing around it: "body"`) {
		t.Errorf("body with a space: %v", err)
	}
}
