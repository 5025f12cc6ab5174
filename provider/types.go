package provider

import (
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"strconv"
)

// The typed tasks. Each turns into the raw Task with the provider's field
// names; Task().Validate() checks it like any raw task. Empty optional
// fields are left out.

// RecaptchaV2 is a reCAPTCHA v2 checkbox or invisible widget.
type RecaptchaV2 struct {
	SiteKey    string // googlekey: data-sitekey in the page
	PageURL    string // the page's absolute URL
	Invisible  bool
	Enterprise bool
	DataS      string // data-s (Google search pages; Enterprise's payload s)
	Domain     string // where the widget loads from: google.com or recaptcha.net
	UserAgent  string
	Cookies    string // "name1=value1; name2=value2"
	Proxy      string // user:pass@host:port
	ProxyType  string // HTTP, HTTPS, SOCKS4, SOCKS5
}

// Task returns the raw form: method userrecaptcha.
func (r RecaptchaV2) Task() Task {
	return rawTask("userrecaptcha", params{
		"googlekey": r.SiteKey, "pageurl": r.PageURL, "invisible": flagParam(r.Invisible),
		"enterprise": flagParam(r.Enterprise), "data-s": r.DataS, "domain": r.Domain, "userAgent": r.UserAgent,
		"cookies": r.Cookies, "proxy": r.Proxy, "proxytype": r.ProxyType,
	})
}

// RecaptchaV3 is a score-based reCAPTCHA v3.
type RecaptchaV3 struct {
	SiteKey    string
	PageURL    string
	Action     string  // the page's action; the provider defaults to "verify"
	MinScore   float64 // 0 leaves it to the provider; 0.3 is realistic
	Enterprise bool
}

// Task returns the raw form: method userrecaptcha with version=v3.
func (r RecaptchaV3) Task() Task {
	score := ""
	if r.MinScore != 0 {
		score = strconv.FormatFloat(r.MinScore, 'f', -1, 64)
	}
	return rawTask("userrecaptcha", params{
		"version": "v3", "googlekey": r.SiteKey, "pageurl": r.PageURL, "action": r.Action,
		"min_score": score, "enterprise": flagParam(r.Enterprise),
	})
}

// Turnstile is a Cloudflare Turnstile widget.
type Turnstile struct {
	SiteKey   string
	PageURL   string
	Action    string // data-action
	Data      string // data-cdata
	PageData  string // chlPageData
	UserAgent string
	Proxy     string
	ProxyType string
}

// Task returns the raw form: method turnstile.
func (t Turnstile) Task() Task {
	return rawTask("turnstile", params{
		"sitekey": t.SiteKey, "pageurl": t.PageURL, "action": t.Action, "data": t.Data,
		"pagedata": t.PageData, "userAgent": t.UserAgent, "proxy": t.Proxy, "proxytype": t.ProxyType,
	})
}

// CloudflareChallenge is Cloudflare's full-page challenge. The answer (a
// cf_clearance cookie) is bound to the proxy's IP and the user agent, so
// both proxy fields are required. A createTask service (CapMonster's
// cf_clearance) also requires the user agent, the page's site key and
// its HTML.
type CloudflareChallenge struct {
	PageURL   string
	Proxy     string
	ProxyType string
	UserAgent string
	SiteKey   string
	HTMLPage  []byte // the challenge page as served, sent base64-encoded
}

// Task returns the raw form: method cloudflare_challenge.
func (c CloudflareChallenge) Task() Task {
	return rawTask("cloudflare_challenge", params{
		"pageurl": c.PageURL, "proxy": c.Proxy, "proxytype": c.ProxyType, "userAgent": c.UserAgent,
		"sitekey": c.SiteKey, "htmlPageBase64": base64.StdEncoding.EncodeToString(c.HTMLPage),
	})
}

// GeeTest is a GeeTest v3 captcha. The challenge is single-use and expires
// quickly: fetch it just before submitting.
type GeeTest struct {
	GT        string
	Challenge string
	PageURL   string
	APIServer string // api_server, e.g. api-na.geetest.com
}

// Task returns the raw form: method geetest.
func (g GeeTest) Task() Task {
	return rawTask("geetest", params{
		"gt": g.GT, "challenge": g.Challenge, "pageurl": g.PageURL, "api_server": g.APIServer,
	})
}

// Image is a text (OCR) captcha. Set Body (sent as method base64) or File
// (a local path, read by Task, at most MaxImageBytes, and uploaded as
// multipart "file" with method post); Body wins when both are set. A File
// that cannot be read gives a task that fails validation.
type Image struct {
	Body             []byte
	File             string
	Phrase           bool // the answer has spaces
	RegSense         bool // case-sensitive
	Numeric          int  // 0 any, 1 digits, 2 letters, 3 digits or letters, 4 both
	Calc             bool // the image shows a sum to compute
	MinLen, MaxLen   int  // 0: no limit
	Lang             string
	TextInstructions string
}

// Task returns the raw form: method base64 or post.
func (i Image) Task() Task {
	return imageTask(i.Body, i.File, params{
		"phrase": flagParam(i.Phrase), "regsense": flagParam(i.RegSense), "numeric": intParam(i.Numeric),
		"calc": flagParam(i.Calc), "min_len": intParam(i.MinLen), "max_len": intParam(i.MaxLen),
		"lang": i.Lang, "textinstructions": i.TextInstructions,
	})
}

// Grid is a click-the-tiles image (reCAPTCHA-style grid): the answer is the
// tile numbers to click.
type Grid struct {
	Body             []byte
	File             string
	TextInstructions string // e.g. "select all images with a bus"
	ImgInstructions  []byte // or an image of it
	Rows, Cols       int    // 0: the provider's default (3×3)
}

// Task returns the raw form: method base64 or post with recaptcha=1.
func (g Grid) Task() Task {
	return imageTask(g.Body, g.File, params{
		"recaptcha": "1", "recaptcharows": intParam(g.Rows), "recaptchacols": intParam(g.Cols),
		"textinstructions": g.TextInstructions, "imginstructions": base64.StdEncoding.EncodeToString(g.ImgInstructions),
	})
}

// imageTask is the task of an image, body (method base64) or else a local
// file (method post), with p's params.
func imageTask(body []byte, file string, p params) Task {
	t := rawTask("base64", p)
	if len(body) > 0 || file == "" {
		t.Params["body"] = base64.StdEncoding.EncodeToString(body)
		return t
	}
	t.Method = "post"
	if data, err := ReadImageFile(file); err == nil {
		t.Params["file"] = base64.StdEncoding.EncodeToString(data)
	}
	return t
}

// ReadImageFile reads a local image for a task, once, at intake: at most
// MaxImageBytes (so /dev/zero or a huge file is refused, not read whole),
// and only a regular file. Only local callers (the command line, library
// users) call it; nothing a remote client sends is read as a path.
func ReadImageFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxImageBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxImageBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes, the provider's limit for an image", path, MaxImageBytes)
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("%s: empty", path)
	}
	return data, nil
}

// BLS is a BLS grid: up to nine images and a numeric instruction code. The
// answer is a JSON array of the matching cells (1-9, reading order).
type BLS struct {
	Instructions string   // the code shown above the grid, e.g. "664"
	Images       [][]byte // the grid's images in reading order (at most 9)
}

// Task returns the raw form: method bls with image_base64_1 … image_base64_9
// as data: URIs.
func (b BLS) Task() Task {
	p := params{"instructions": b.Instructions}
	for n, img := range b.Images {
		if n >= 9 {
			break
		}
		p["image_base64_"+strconv.Itoa(n+1)] = "data:" + http.DetectContentType(img) + ";base64," + base64.StdEncoding.EncodeToString(img)
	}
	return rawTask("bls", p)
}

// CaptchaFox is a CaptchaFox widget (beta at the provider).
type CaptchaFox struct {
	SiteKey   string
	PageURL   string
	APIServer string
	UserAgent string
	Proxy     string
	ProxyType string
}

// Task returns the raw form: method captchafox.
func (c CaptchaFox) Task() Task {
	return rawTask("captchafox", params{
		"sitekey": c.SiteKey, "pageurl": c.PageURL, "api_server": c.APIServer, "userAgent": c.UserAgent,
		"proxy": c.Proxy, "proxytype": c.ProxyType,
	})
}

// FriendlyCaptcha is a Friendly Captcha widget (beta at the provider).
type FriendlyCaptcha struct {
	SiteKey string
	PageURL string
}

// Task returns the raw form: method friendly_captcha.
func (f FriendlyCaptcha) Task() Task {
	return rawTask("friendly_captcha", params{"sitekey": f.SiteKey, "pageurl": f.PageURL})
}

// Lemin is a Lemin cropped-puzzle captcha (beta at the provider).
type Lemin struct {
	CaptchaID string
	PageURL   string
	DivID     string
	APIServer string
}

// Task returns the raw form: method lemin.
func (l Lemin) Task() Task {
	return rawTask("lemin", params{
		"captcha_id": l.CaptchaID, "pageurl": l.PageURL, "div_id": l.DivID, "api_server": l.APIServer,
	})
}

// params are a typed task's params by name: rawTask leaves out the empty
// ones.
type params map[string]string

// rawTask is the task of method with p's values, the empty ones left out.
func rawTask(method string, p params) Task {
	maps.DeleteFunc(p, func(_, v string) bool { return v == "" })
	return Task{Method: method, Params: p}
}

// flagParam is a flag's value: "1" when set, else "" (left out).
func flagParam(v bool) string {
	if v {
		return "1"
	}
	return ""
}

// intParam is a number's value: its text, or "" (left out) for 0.
func intParam(v int) string {
	if v == 0 {
		return ""
	}
	return strconv.Itoa(v)
}
