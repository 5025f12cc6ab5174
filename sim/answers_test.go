package sim_test

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/sim"
)

var png = append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 200)...)

func TestSubmitForms(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Threads: 20, Instant: true, Seed: 1})
	b64 := base64.StdEncoding.EncodeToString(png)
	tests := []struct {
		name string
		call func(t *testing.T, json bool) string
	}{
		{"GET query", func(t *testing.T, js bool) string {
			return b.get(t, "/in.php", withJSON(recaptcha(), js))
		}},
		{"POST urlencoded", func(t *testing.T, js bool) string {
			return b.post(t, "/in.php", withJSON(recaptcha(), js))
		}},
		{"POST multipart file", func(t *testing.T, js bool) string {
			return b.multipart(t, "/in.php", withJSON(form("key", key, "method", "post", "numeric", "1"), js), png)
		}},
		{"POST multipart base64", func(t *testing.T, js bool) string {
			return b.multipart(t, "/in.php", withJSON(form("key", key, "method", "base64", "body", b64), js), nil)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name+" json", func(t *testing.T) {
			a := decode(t, tt.call(t, true))
			if a.Status != 1 || !isDigits(a.str(t)) || len(a.str(t)) != 11 {
				t.Fatalf("answer %+v, want status 1 and an 11-digit id string", a)
			}
			if p := b.poll(t, a.str(t)); p.Status != 1 {
				t.Fatalf("poll of an instant task: %s", p.Request)
			}
		})
		t.Run(tt.name+" plain", func(t *testing.T) {
			body := tt.call(t, false)
			id, ok := strings.CutPrefix(body, "OK|")
			if !ok || !isDigits(id) || len(id) != 11 {
				t.Fatalf("answer %q, want OK|<11 digits>", body)
			}
			got := b.get(t, "/res.php", form("key", key, "action", "get", "id", id))
			if !strings.HasPrefix(got, "OK|") || len(got) < 5 {
				t.Fatalf("plain poll %q, want OK|<answer>", got)
			}
		})
	}
}

func withJSON(v map[string][]string, js bool) map[string][]string {
	if js {
		v["json"] = []string{"1"}
	} else {
		delete(v, "json")
	}
	return v
}

func TestSequentialIDsAndNumericIDs(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Threads: 5, Seed: 3})
	first, _ := strconv.ParseUint(b.submit(t, recaptcha()), 10, 64)
	second, _ := strconv.ParseUint(b.submit(t, recaptcha()), 10, 64)
	if second != first+1 {
		t.Fatalf("ids %d then %d, want consecutive", first, second)
	}

	n := setup(t, sim.Config{Threads: 5, Seed: 3, NumericIDs: true})
	a := decode(t, n.post(t, "/in.php", recaptcha()))
	var id uint64
	if err := json.Unmarshal(a.Request, &id); err != nil || id != first {
		t.Fatalf("numeric id answer %s, want the number %d (same seed, same first id)", a.Request, first)
	}
	if body := n.post(t, "/in.php", withJSON(recaptcha(), false)); body != "OK|"+strconv.FormatUint(first+1, 10) {
		t.Fatalf("plain answer %q with NumericIDs", body)
	}
}

func TestPollAnswersByKind(t *testing.T) {
	t.Parallel()
	clock := newManualClock()
	lat := map[provider.Kind]sim.Latency{}
	for k := range sim.DefaultLatency {
		lat[k] = fixed(10 * time.Second)
	}
	b := setup(t, sim.Config{Threads: 20, Latency: lat, Now: clock.Now, Seed: 9})
	const ua = "Mozilla/5.0 (X11; Linux x86_64) Test/1.0"
	ids := map[string]string{
		"recaptcha": b.submit(t, recaptcha()),
		"v3":        b.submit(t, recaptcha("version", "v3", "action", "login", "min_score", "0.3")),
		"turnstile": b.submit(t, form("key", key, "method", "turnstile", "sitekey", "0x4AAAAAAA", "pageurl", "https://shop.example/")),
		"geetest":   b.submit(t, form("key", key, "method", "geetest", "gt", "81388ea1fc187e0c335c0a8907ff2625", "challenge", "2e2f0f65240058b683cb6ea21c303eea6n", "pageurl", "https://shop.example/")),
		"cf":        b.submit(t, form("key", key, "method", "cloudflare_challenge", "pageurl", "https://shop.example/", "proxy", "u:p@10.0.0.1:3128", "proxytype", "HTTP", "userAgent", ua)),
		"image":     b.submit(t, form("key", key, "method", "base64", "body", base64.StdEncoding.EncodeToString(png), "numeric", "1", "min_len", "5", "max_len", "5")),
		"grid":      b.submit(t, form("key", key, "method", "base64", "recaptcha", "1", "textinstructions", "bus", "body", base64.StdEncoding.EncodeToString(png))),
	}
	for name, id := range ids {
		if a := b.poll(t, id); a.Status != 0 || a.str(t) != "CAPCHA_NOT_READY" {
			t.Fatalf("%s before its solve time: %s", name, a.Request)
		}
	}
	if body := b.get(t, "/res.php", form("key", key, "action", "get", "id", ids["recaptcha"])); body != "CAPCHA_NOT_READY" {
		t.Fatalf("plain not-ready answer %q", body)
	}
	clock.Advance(10*time.Second - time.Nanosecond)
	if a := b.poll(t, ids["turnstile"]); a.str(t) != "CAPCHA_NOT_READY" {
		t.Fatalf("1ns before its solve time: %s", a.Request)
	}
	clock.Advance(time.Nanosecond)

	tok := b.poll(t, ids["recaptcha"]).str(t)
	if !strings.HasPrefix(tok, "03A") || len(tok) < 480 {
		t.Errorf("recaptcha token %q: want 03A… of 480+ chars", tok)
	}
	if again := b.poll(t, ids["recaptcha"]).str(t); again != tok {
		t.Errorf("second poll gave another token")
	}
	if plain := b.get(t, "/res.php", form("key", key, "action", "get", "id", ids["recaptcha"])); plain != "OK|"+tok {
		t.Errorf("plain poll %q, want OK|<same token>", plain)
	}
	if v3 := b.poll(t, ids["v3"]).str(t); !strings.HasPrefix(v3, "03A") || v3 == tok {
		t.Errorf("v3 token %q: want another 03A… token", v3)
	}
	if ts := b.poll(t, ids["turnstile"]).str(t); !strings.HasPrefix(ts, "0.") {
		t.Errorf("turnstile token %q: want 0.…", ts)
	}
	if img := b.poll(t, ids["image"]).str(t); len(img) != 5 || !isDigits(img) {
		t.Errorf("image text %q: want 5 digits (numeric=1, min_len=max_len=5)", img)
	}
	if grid := b.poll(t, ids["grid"]).str(t); !strings.HasPrefix(grid, "click:") {
		t.Errorf("grid answer %q: want click:…", grid)
	}

	var gt map[string]string
	if err := json.Unmarshal(b.poll(t, ids["geetest"]).Request, &gt); err != nil {
		t.Fatalf("geetest answer is not an object: %v", err)
	}
	if !strings.HasPrefix(gt["geetest_challenge"], "2e2f0f65240058b683cb6ea21c303eea6n") || len(gt["geetest_validate"]) != 32 || !strings.HasSuffix(gt["geetest_seccode"], "|jordan") {
		t.Errorf("geetest answer %v", gt)
	}
	plainGT := b.get(t, "/res.php", form("key", key, "action", "get", "id", ids["geetest"]))
	var gt2 map[string]string
	if err := json.Unmarshal([]byte(strings.TrimPrefix(plainGT, "OK|")), &gt2); err != nil || gt2["geetest_validate"] != gt["geetest_validate"] {
		t.Errorf("plain geetest answer %q, want OK|<same JSON object>", plainGT)
	}
	var cf map[string]string
	if err := json.Unmarshal(b.poll(t, ids["cf"]).Request, &cf); err != nil {
		t.Fatalf("cloudflare answer is not an object: %v", err)
	}
	if cf["cf_clearance"] == "" || cf["user_agent"] != ua {
		t.Errorf("cloudflare answer %v: want cf_clearance and the submitted user agent", cf)
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Threads: 5, Key: key, Instant: true})
	tests := []struct {
		name     string
		v        map[string][]string
		want     string
		wantText string
	}{
		{"no key", form("method", "userrecaptcha", "googlekey", "k", "pageurl", "https://a.example/"), "ERROR_WRONG_USER_KEY", ""},
		{"wrong key", recaptcha("key", "other"), "ERROR_WRONG_USER_KEY", ""},
		{"missing googlekey", recaptcha("googlekey", ""), "ERROR_GOOGLEKEY", ""},
		{"pageurl without scheme", recaptcha("pageurl", "shop.example/login"), "ERROR_PAGEURL", ""},
		{"missing pageurl", form("key", key, "method", "turnstile", "sitekey", "0x4A"), "ERROR_PAGEURL", ""},
		{"hcaptcha", form("key", key, "method", "hcaptcha", "sitekey", "x", "pageurl", "https://a.example/"), "ERROR_BAD_PARAMETERS", "hCaptcha"},
		{"unknown method", form("key", key, "method", "nosuch"), "ERROR_BAD_PARAMETERS", "nosuch"},
		{"no method", form("key", key), "ERROR_BAD_PARAMETERS", "method"},
		{"turnstile without sitekey", form("key", key, "method", "turnstile", "pageurl", "https://a.example/"), "ERROR_BAD_PARAMETERS", "sitekey"},
		{"cloudflare without proxy", form("key", key, "method", "cloudflare_challenge", "pageurl", "https://a.example/", "proxytype", "HTTP"), "ERROR_BAD_PARAMETERS", "proxy"},
		{"bad proxy", recaptcha("proxy", "10.0.0.1"), "ERROR_BAD_PROXY", ""},
		{"bad proxytype", recaptcha("proxy", "10.0.0.1:80", "proxytype", "FTP"), "ERROR_BAD_PARAMETERS", "proxytype"},
		{"geetest without challenge", form("key", key, "method", "geetest", "gt", "g", "pageurl", "https://a.example/"), "ERROR_BAD_PARAMETERS", "challenge"},
		{"post without file", form("key", key, "method", "post"), "ERROR_ZERO_CAPTCHA_FILESIZE", ""},
		{"bad base64", form("key", key, "method", "base64", "body", "***"), "ERROR_IMAGE_TYPE_NOT_SUPPORTED", ""},
		{"grid without instructions", form("key", key, "method", "base64", "recaptcha", "1", "body", "aGVsbG8="), "ERROR_BAD_PARAMETERS", "textinstructions"},
		{"v3 min_score out of range", recaptcha("version", "v3", "min_score", "2"), "ERROR_BAD_PARAMETERS", "min_score"},
		{"bad pingback", recaptcha("pingback", "not a url"), "ERROR_BAD_PARAMETERS", "pingback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.v["json"] = []string{"1"}
			a := decode(t, b.post(t, "/in.php", tt.v))
			if a.Status != 0 || a.str(t) != tt.want || !strings.Contains(a.ErrorText, tt.wantText) {
				t.Fatalf("answer %s %q, want %s with text naming %q", a.Request, a.ErrorText, tt.want, tt.wantText)
			}
			delete(tt.v, "json")
			if plain := b.post(t, "/in.php", tt.v); plain != tt.want {
				t.Fatalf("plain answer %q, want %s", plain, tt.want)
			}
		})
	}
	t.Run("mixed-case names", func(t *testing.T) {
		t.Parallel()
		v := form("key", key, "method", "userrecaptcha", "googleKey", "6Le", "pageUrl", "https://a.example/", "userAgent", "UA", "json", "1")
		if a := decode(t, b.post(t, "/in.php", v)); a.Status != 1 {
			t.Fatalf("answer %s %q, want an id", a.Request, a.ErrorText)
		}
	})
}

func TestValidationAcceptsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, sim.Config{Threads: 5, Key: key})
	b.post(t, "/in.php", recaptcha("googlekey", ""))
	b.post(t, "/in.php", recaptcha("key", "wrong"))
	if st := b.srv.Stats(); st.Accepted != 0 || st.ThreadsInUse != 0 || st.Calls.Submit != 2 {
		t.Fatalf("after two rejected submits: accepted %d, in use %d, submit calls %d", st.Accepted, st.ThreadsInUse, st.Calls.Submit)
	}
}

// A token is bound to the task it answers and to the seed, as a real
// provider's are: the same seed and requests give the same ids and tokens;
// the same id for another sitekey or page, or another seed, another token.
// A client that mixes up two tasks' tokens is then caught.
func TestTokensBoundToTheTaskAndTheSeed(t *testing.T) {
	t.Parallel()
	run := func(seed uint64, v url.Values) (id, token string) {
		b := setup(t, sim.Config{Threads: 5, Instant: true, Seed: seed})
		id = b.submit(t, v)
		p := b.poll(t, id)
		if p.Status != 1 {
			t.Fatalf("poll of an instant task: %s", p.Request)
		}
		return id, p.str(t)
	}
	id1, tok1 := run(7, recaptcha())
	id2, tok2 := run(7, recaptcha())
	if id1 != id2 || tok1 != tok2 {
		t.Fatalf("seed 7 twice: ids %s, %s and tokens differ (%.12s…, %.12s…): want the same run", id1, id2, tok1, tok2)
	}
	idKey, tokKey := run(7, recaptcha("googlekey", "6Lc-otherSiteKeyAAAAAAAAAAAAAAAAAAAAAAAAA"))
	idPage, tokPage := run(7, recaptcha("pageurl", "https://shop.example/checkout"))
	if idKey != id1 || idPage != id1 {
		t.Fatalf("ids %s, %s, want %s (same seed, first submit)", idKey, idPage, id1)
	}
	if tokKey == tok1 || tokPage == tok1 || tokKey == tokPage {
		t.Errorf("one id's tokens for three tasks: %.12s…, %.12s…, %.12s…: want three", tok1, tokKey, tokPage)
	}
	id8, tok8 := run(8, recaptcha())
	if id8 == id1 || tok8 == tok1 {
		t.Errorf("seeds 7 and 8: ids %s, %s, tokens %.12s…, %.12s…: want both different", id1, id8, tok1, tok8)
	}
}
