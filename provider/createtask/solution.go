package createtask

import (
	"bytes"
	"cmp"
	"encoding/json"
	"maps"
	"strings"

	"github.com/captchaq/captchaq/provider"
)

// Solution is the solution object of an answer of kind k, as the
// services return it: ImageToTextTask {text}; reCAPTCHA
// {gRecaptchaResponse, token}; Turnstile {token, userAgent}; hCaptcha
// {gRecaptchaResponse, token, userAgent}; FunCaptcha {token}; GeeTest v3
// {challenge, validate, seccode}; GeeTest v4 the answer's fields
// (captcha_id, lot_number, pass_token, gen_time, captcha_output); Amazon
// WAF {captcha_voucher, existing_token}; MTCaptcha {token}; DataDome
// {cookie, userAgent}. token
// and raw are the answer (provider.Answer's Token and, for structured
// answers or a token with its bindings, its JSON); params are the task's.
// Cloudflare Challenge {cf_clearance}; grid {click}; Lemin {answer,
// challenge_id}; CaptchaFox, Friendly Captcha, MTCaptcha {token}; Amazon
// WAF {captcha_voucher, existing_token}; DataDome {cookie}. What the
// answer binds the token to (BindingsFor: its user agent under any
// spelling, cookies, proxy; else the task's user agent for the kinds
// solved with it) is added as userAgent, cookies and proxy to every kind's
// solution: a made-up one would be a token the site refuses. Any other kind (a task taken by
// in.php) answers {token}, with a structured answer's fields beside it.
func Solution(k provider.Kind, token string, raw json.RawMessage, params map[string]string) map[string]any {
	var out map[string]any
	switch k {
	case provider.KindImage:
		out = map[string]any{"text": token}
	case provider.KindRecaptchaV2, provider.KindRecaptchaV3:
		out = map[string]any{"gRecaptchaResponse": token, "token": token}
	case provider.KindHCaptcha:
		out = map[string]any{"gRecaptchaResponse": token, "token": token}
	case provider.KindTurnstile, provider.KindFunCaptcha, provider.KindCaptchaFox, provider.KindFriendlyCaptcha, provider.KindMTCaptcha:
		out = map[string]any{"token": token}
	case provider.KindDataDome:
		out = map[string]any{"cookie": token}
	case provider.KindCloudflareChallenge:
		out = map[string]any{"cf_clearance": cmp.Or(objectString(raw, "cf_clearance"), token)}
	case provider.KindGrid:
		out = map[string]any{"text": token}
		if c, ok := clicks(token); ok {
			out = map[string]any{"click": c}
		}
	case provider.KindGeeTest:
		doc := geeTestDoc(raw, token)
		out = map[string]any{"challenge": doc["geetest_challenge"], "validate": doc["geetest_validate"], "seccode": doc["geetest_seccode"]}
	default:
		out = map[string]any{}
		var doc map[string]any
		if len(raw) > 0 && json.Unmarshal(raw, &doc) == nil {
			if _, env := doc["request"]; env {
				// a res.php answer: its request is the token
				delete(doc, "request")
				delete(doc, "status")
			}
			maps.Copy(out, doc)
		}
		if !fieldsOnly(k) || len(out) == 0 {
			out["token"] = token
		}
	}
	BindingsFor(k, raw, params).AddTo(out, "userAgent")
	return out
}

// fieldsOnly reports whether a kind's answer is a JSON object whose
// fields are the solution (GeeTest v4, Lemin, Amazon WAF), with no token
// beside them.
func fieldsOnly(k provider.Kind) bool {
	return k == provider.KindGeeTestV4 || k == provider.KindLemin || k == provider.KindAmazonWAF
}

// BindingsFor is what an answer of kind k binds its token to: the
// answer's bindings (provider.BindingsOf), and for a Turnstile, hCaptcha,
// Cloudflare Challenge, CaptchaFox or DataDome answered without a user
// agent the task's userAgent (params), which it was solved with; none
// without either. A DataDome cookie is the answer itself, not a binding.
func BindingsFor(k provider.Kind, raw json.RawMessage, params map[string]string) provider.Bindings {
	b := provider.BindingsOf(raw)
	if k == provider.KindDataDome {
		b.Cookies = nil
	}
	if b.UserAgent == "" && SolvedWithTaskUserAgent(k) {
		b.UserAgent = strings.TrimSpace(foldParams(params)["useragent"])
	}
	return b
}

// SolvedWithTaskUserAgent reports whether a task of kind k is solved in a
// browser of the task's userAgent when it names one (Turnstile, hCaptcha,
// Cloudflare Challenge, CaptchaFox, DataDome): its token is bound to it.
func SolvedWithTaskUserAgent(k provider.Kind) bool {
	switch k {
	case provider.KindTurnstile, provider.KindHCaptcha, provider.KindCloudflareChallenge, provider.KindCaptchaFox, provider.KindDataDome:
		return true
	}
	return false
}

// geeTestDoc reads a GeeTest v3 answer: {"geetest_challenge", …}, from
// the structured answer or the token's text.
func geeTestDoc(raw json.RawMessage, token string) map[string]string {
	doc := map[string]string{}
	if len(raw) == 0 {
		raw = json.RawMessage(token)
	}
	var m map[string]any
	if json.Unmarshal(raw, &m) == nil {
		for k, v := range m {
			if s, ok := v.(string); ok {
				doc[k] = s
			}
		}
	}
	return doc
}

// objectString is a string field of a JSON object, "" when absent.
func objectString(raw json.RawMessage, name string) string {
	if len(raw) == 0 {
		return ""
	}
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return ""
	}
	s, _ := m[name].(string)
	return s
}

// AnswerOf reads a solution object of a task of kind k back into the
// queue's answer, the same an in.php service gives for that kind: the
// text or token; GeeTest v3 as {"geetest_challenge","geetest_validate",
// "geetest_seccode"}; GeeTest v4 and Amazon WAF as their fields; a
// DataDome cookie as its text. ok is false when the solution has no
// answer for k.
func AnswerOf(k provider.Kind, solution json.RawMessage) (provider.Answer, bool) {
	obj, f := foldObject(solution, "solution")
	if f != nil {
		return provider.Answer{}, false
	}
	text := func(names ...string) (provider.Answer, bool) {
		for _, n := range names {
			if s, ok := obj.str(n); ok && s != "" {
				return bound(s, solution), true
			}
		}
		return provider.Answer{}, false
	}
	structured := func(v any) (provider.Answer, bool) {
		b, err := json.Marshal(v)
		if err != nil {
			return provider.Answer{}, false
		}
		return provider.Answer{Raw: string(b), Token: string(b), JSON: json.RawMessage(b)}, true
	}
	switch k {
	case provider.KindImage:
		return text("text")
	case provider.KindRecaptchaV2, provider.KindRecaptchaV3, provider.KindHCaptcha:
		return text("gRecaptchaResponse", "token")
	case provider.KindGeeTest:
		c, _ := obj.str("challenge")
		v, _ := obj.str("validate")
		s, _ := obj.str("seccode")
		if c == "" || v == "" || s == "" {
			return provider.Answer{}, false
		}
		return structured(map[string]string{"geetest_challenge": c, "geetest_validate": v, "geetest_seccode": s})
	case provider.KindDataDome:
		return text("cookie")
	case provider.KindGeeTestV4, provider.KindAmazonWAF:
		var m map[string]any
		if json.Unmarshal(solution, &m) != nil || len(m) == 0 {
			return provider.Answer{}, false
		}
		return structured(m)
	case provider.KindLemin:
		a, _ := obj.str("answer")
		id, _ := obj.str("challenge_id")
		if a == "" || id == "" {
			return provider.Answer{}, false
		}
		return structured(map[string]string{"answer": a, "challenge_id": id})
	case provider.KindGrid:
		var g struct{ Click []int }
		if json.Unmarshal(solution, &g) == nil && len(g.Click) > 0 {
			s := clickAnswer(g.Click)
			return provider.Answer{Raw: s, Token: s}, true
		}
	case provider.KindCloudflareChallenge:
		// The cookie is the token; the solution, with what binds it, the
		// answer, as an in.php service's JSON answer is.
		cf, _ := obj.str("cf_clearance")
		var buf bytes.Buffer
		if cf == "" || json.Compact(&buf, solution) != nil {
			return provider.Answer{}, false
		}
		return provider.Answer{Raw: buf.String(), Token: cf, JSON: json.RawMessage(buf.String())}, true
	}
	return text("token", "text", "gRecaptchaResponse")
}

// bound is the answer token of a solution: the solution itself is kept as
// the answer's JSON when it binds the token to something (a user agent,
// cookies, a proxy), so those reach the client with the token.
func bound(token string, solution json.RawMessage) provider.Answer {
	a := provider.Answer{Raw: token, Token: token}
	var buf bytes.Buffer
	if !provider.BindingsOf(solution).Empty() && json.Compact(&buf, solution) == nil {
		a.Raw = buf.String()
		a.JSON = json.RawMessage(a.Raw)
	}
	return a
}
