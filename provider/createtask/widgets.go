package createtask

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/captchaq/captchaq/provider"
)

// need is a field a family requires: its createTask name, the in.php param
// it carries and what to give.
type need struct {
	wire, param, hint string
}

// needProxy: the answer is bound to the proxy's IP address.
var needProxy = need{"proxyAddress", "proxy", "the proxy the answer will be used through (proxyType, proxyAddress, proxyPort)"}

var fAPIDomain = field{wire: "apiDomain", param: "domain"}

var (
	// typeGrid is a click-the-tiles image: in.php's base64 with recaptcha=1.
	typeGrid = &taskType{kind: provider.KindGrid, method: "base64", fields: []field{
		{wire: "body", param: "body"},
		{wire: "rows", param: "recaptcharows", kind: vNumber},
		{wire: "columns", param: "recaptchacols", kind: vNumber},
		{wire: "comment", alias: []string{"textinstructions"}, param: "textinstructions"},
		{wire: "imgInstructions", param: "imginstructions"},
	}}
	typeLemin = &taskType{kind: provider.KindLemin, method: "lemin", proxy: true, fields: []field{
		fWebsiteURL,
		{wire: "captchaId", param: "captcha_id"},
		{wire: "divId", param: "div_id"},
		{wire: "leminApiServerSubdomain", param: "api_server"},
		fUserAgent,
	}}
	typeCaptchaFox = &taskType{kind: provider.KindCaptchaFox, method: "captchafox", proxy: true, fields: []field{
		fWebsiteURL,
		fWebsiteKey,
		fUserAgent,
	}, needs: []need{{"userAgent", "userAgent", "the browser user agent the token will be used with"}, needProxy}}
	typeFriendly = &taskType{kind: provider.KindFriendlyCaptcha, method: "friendly_captcha", proxy: true, fields: []field{
		fWebsiteURL,
		fWebsiteKey,
	}}
	// typeCFClearance is TurnstileTask with cloudflareTaskType cf_clearance:
	// a challenge page solved for its cookie. No type name of its own.
	typeCFClearance = &taskType{kind: provider.KindCloudflareChallenge, method: "cloudflare_challenge", proxy: true, fields: []field{
		fWebsiteURL,
		fWebsiteKey,
		{wire: "htmlPageBase64", param: "htmlPageBase64"},
		fUserAgent,
	}, needs: []need{
		{"htmlPageBase64", "htmlPageBase64", "the challenge page's HTML, base64-encoded, read just before the task is sent"},
		{"userAgent", "userAgent", "the browser user agent the cookie will be used with (the cookie is bound to it)"},
		{"websiteKey", "sitekey", "the Turnstile site key in the challenge page"},
		needProxy,
	}}
)

// families are every family, for TaskObject to find a kind's.
var families = []*taskType{
	typeImage, typeGrid, typeRecaptchaV2, typeRecaptchaV3, typeTurnstile, typeCFClearance, typeGeeTest, typeGeeTestV4,
	typeHCaptcha, typeFunCaptcha, typeLemin, typeCaptchaFox, typeFriendly,
	typeAmazonWAF, typeMTCaptcha, typeDataDome,
}

// checkNeeds refuses a task object without a field its family needs.
func checkNeeds(tt *taskType, tn typeName, params map[string]string) *Fault {
	name, proxyName := tn.name, tn.name
	if tt == typeCFClearance {
		name += ` with cloudflareTaskType "cf_clearance"`
		proxyName = "TurnstileTask"
	}
	for _, n := range tt.needs {
		if strings.TrimSpace(params[n.param]) != "" {
			continue
		}
		if n == needProxy {
			return fault("ERROR_BAD_PROXY", fmt.Sprintf("task.proxyAddress: a proxy is required for %s: send %s with %s; the answer is bound to its IP address", name, proxyName, n.hint))
		}
		return fault("ERROR_BAD_PARAMETERS", fmt.Sprintf("task.%s: required for %s; %s", n.wire, name, n.hint))
	}
	return nil
}

// sendNeeds refuses to send a task a createTask service would refuse for
// a field its family needs, naming the in.php param.
func sendNeeds(tt *taskType, k provider.Kind, params map[string]string) error {
	for _, n := range tt.needs {
		if strings.TrimSpace(params[strings.ToLower(n.param)]) == "" {
			return &provider.ValidationError{Field: "params." + n.param,
				Reason: fmt.Sprintf("required to send a %s task to a createTask service (its %s): %s; or route it to an in.php provider", k, n.wire, n.hint)}
		}
	}
	return nil
}

// enterprisePayload reads a reCAPTCHA Enterprise task's enterprisePayload,
// {"s":"…"}, into in.php's data-s: the one field in.php carries.
func enterprisePayload(obj folded, tn typeName, params map[string]string) *Fault {
	name, raw, ok := obj.get("enterprisePayload")
	if !ok || string(bytes.TrimSpace(raw)) == "null" {
		return nil
	}
	if tn.extra["enterprise"] == "" {
		use := "RecaptchaV2EnterpriseTaskProxyless"
		if tn.proxy {
			use = "RecaptchaV2EnterpriseTask"
		}
		return fault("ERROR_BAD_PARAMETERS", fmt.Sprintf("task.%s: %s takes none; use %s, or send the s value as recaptchaDataSValue", name, tn.name, use))
	}
	p, f := foldObject(raw, "task."+name)
	if f != nil {
		return fault("ERROR_BAD_PARAMETERS", f.Description+`, such as {"s":"…"}`)
	}
	for _, lk := range slices.Sorted(maps.Keys(p)) {
		if lk != "s" {
			return fault("ERROR_BAD_PARAMETERS", fmt.Sprintf("task.%s.%s: not carried: only s is (in.php's data-s); remove it", name, p[lk].name))
		}
	}
	_, v, ok := p.get("s")
	if !ok {
		return nil
	}
	s, f := convert(name+".s", v, vString)
	if f != nil {
		return f
	}
	if prev := params["data-s"]; prev != "" && s != "" && prev != s {
		return fault("ERROR_BAD_PARAMETERS", fmt.Sprintf("task.%s.s: differs from task.recaptchaDataSValue; give the s value once", name))
	}
	if strings.TrimSpace(s) != "" {
		params["data-s"] = s
	}
	return nil
}

// clicks reads a grid answer, in.php's "click:1/4/7", as its tile numbers.
func clicks(token string) ([]int, bool) {
	s, ok := strings.CutPrefix(strings.TrimSpace(token), "click:")
	if !ok || s == "" {
		return nil, false
	}
	var out []int
	for part := range strings.SplitSeq(s, "/") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 {
			return nil, false
		}
		out = append(out, n)
	}
	return out, true
}

// clickAnswer is a grid solution's click array as in.php's answer.
func clickAnswer(click []int) string {
	parts := make([]string, len(click))
	for i, n := range click {
		parts[i] = strconv.Itoa(n)
	}
	return "click:" + strings.Join(parts, "/")
}
