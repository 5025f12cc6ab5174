package provider

import (
	"encoding/base64"
	"fmt"
	"io"
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
	p := params{}
	p.set("googlekey", r.SiteKey)
	p.set("pageurl", r.PageURL)
	p.flag("invisible", r.Invisible)
	p.flag("enterprise", r.Enterprise)
	p.set("data-s", r.DataS)
	p.set("domain", r.Domain)
	p.set("userAgent", r.UserAgent)
	p.set("cookies", r.Cookies)
	p.set("proxy", r.Proxy)
	p.set("proxytype", r.ProxyType)
	return Task{Method: "userrecaptcha", Params: p}
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
	p := params{"version": "v3"}
	p.set("googlekey", r.SiteKey)
	p.set("pageurl", r.PageURL)
	p.set("action", r.Action)
	if r.MinScore != 0 {
		p["min_score"] = strconv.FormatFloat(r.MinScore, 'f', -1, 64)
	}
	p.flag("enterprise", r.Enterprise)
	return Task{Method: "userrecaptcha", Params: p}
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
	p := params{}
	p.set("sitekey", t.SiteKey)
	p.set("pageurl", t.PageURL)
	p.set("action", t.Action)
	p.set("data", t.Data)
	p.set("pagedata", t.PageData)
	p.set("userAgent", t.UserAgent)
	p.set("proxy", t.Proxy)
	p.set("proxytype", t.ProxyType)
	return Task{Method: "turnstile", Params: p}
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
	p := params{}
	p.set("pageurl", c.PageURL)
	p.set("proxy", c.Proxy)
	p.set("proxytype", c.ProxyType)
	p.set("userAgent", c.UserAgent)
	p.set("sitekey", c.SiteKey)
	if len(c.HTMLPage) > 0 {
		p["htmlPageBase64"] = base64.StdEncoding.EncodeToString(c.HTMLPage)
	}
	return Task{Method: "cloudflare_challenge", Params: p}
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
	p := params{}
	p.set("gt", g.GT)
	p.set("challenge", g.Challenge)
	p.set("pageurl", g.PageURL)
	p.set("api_server", g.APIServer)
	return Task{Method: "geetest", Params: p}
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
	t := imageTask(i.Body, i.File)
	p := params(t.Params)
	p.flag("phrase", i.Phrase)
	p.flag("regsense", i.RegSense)
	p.int("numeric", i.Numeric)
	p.flag("calc", i.Calc)
	p.int("min_len", i.MinLen)
	p.int("max_len", i.MaxLen)
	p.set("lang", i.Lang)
	p.set("textinstructions", i.TextInstructions)
	return t
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
	t := imageTask(g.Body, g.File)
	p := params(t.Params)
	p["recaptcha"] = "1"
	p.set("textinstructions", g.TextInstructions)
	if len(g.ImgInstructions) > 0 {
		p["imginstructions"] = base64.StdEncoding.EncodeToString(g.ImgInstructions)
	}
	p.int("recaptcharows", g.Rows)
	p.int("recaptchacols", g.Cols)
	return t
}

func imageTask(body []byte, file string) Task {
	if len(body) > 0 || file == "" {
		return Task{Method: "base64", Params: params{"body": base64.StdEncoding.EncodeToString(body)}}
	}
	data, err := ReadImageFile(file)
	if err != nil {
		return Task{Method: "post", Params: params{}}
	}
	return Task{Method: "post", Params: params{"file": base64.StdEncoding.EncodeToString(data)}}
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
	p := params{}
	p.set("instructions", b.Instructions)
	for n, img := range b.Images {
		if n >= 9 {
			break
		}
		p["image_base64_"+strconv.Itoa(n+1)] = "data:" + http.DetectContentType(img) + ";base64," + base64.StdEncoding.EncodeToString(img)
	}
	return Task{Method: "bls", Params: p}
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
	p := params{}
	p.set("sitekey", c.SiteKey)
	p.set("pageurl", c.PageURL)
	p.set("api_server", c.APIServer)
	p.set("userAgent", c.UserAgent)
	p.set("proxy", c.Proxy)
	p.set("proxytype", c.ProxyType)
	return Task{Method: "captchafox", Params: p}
}

// FriendlyCaptcha is a Friendly Captcha widget (beta at the provider).
type FriendlyCaptcha struct {
	SiteKey string
	PageURL string
}

// Task returns the raw form: method friendly_captcha.
func (f FriendlyCaptcha) Task() Task {
	p := params{}
	p.set("sitekey", f.SiteKey)
	p.set("pageurl", f.PageURL)
	return Task{Method: "friendly_captcha", Params: p}
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
	p := params{}
	p.set("captcha_id", l.CaptchaID)
	p.set("pageurl", l.PageURL)
	p.set("div_id", l.DivID)
	p.set("api_server", l.APIServer)
	return Task{Method: "lemin", Params: p}
}

// params builds a Params map, leaving out empty values.
type params map[string]string

func (p params) set(k, v string) {
	if v != "" {
		p[k] = v
	}
}

func (p params) flag(k string, v bool) {
	if v {
		p[k] = "1"
	}
}

func (p params) int(k string, v int) {
	if v != 0 {
		p[k] = strconv.Itoa(v)
	}
}
