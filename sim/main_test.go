package sim_test

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/captchaq/captchaq/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// manualClock is a clock that moves only when told.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func newManualClock() *manualClock {
	return &manualClock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// bundle is one simulator on loopback.
type bundle struct {
	srv  *sim.Server
	base string
}

func setup(t *testing.T, cfg sim.Config) *bundle {
	t.Helper()
	srv, err := sim.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	return &bundle{srv: srv, base: hs.URL}
}

// fixed is a latency of exactly d.
func fixed(d time.Duration) sim.Latency { return sim.Latency{Median: d, Min: d, Max: d} }

// form builds url.Values from name, value pairs.
func form(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}

// get calls path with the values in the query and returns the body.
func (b *bundle) get(t *testing.T, path string, v url.Values) string {
	t.Helper()
	resp, err := http.Get(b.base + path + "?" + v.Encode())
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return readBody(t, resp)
}

// post calls path with the values urlencoded in the body.
func (b *bundle) post(t *testing.T, path string, v url.Values) string {
	t.Helper()
	resp, err := http.PostForm(b.base+path, v)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return readBody(t, resp)
}

// multipart posts v and an optional file part to path.
func (b *bundle) multipart(t *testing.T, path string, v url.Values, file []byte) string {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for name, vs := range v {
		for _, s := range vs {
			_ = mw.WriteField(name, s)
		}
	}
	if file != nil {
		fw, _ := mw.CreateFormFile("file", "captcha.png")
		_, _ = fw.Write(file)
	}
	_ = mw.Close()
	resp, err := http.Post(b.base+path, mw.FormDataContentType(), &buf)
	if err != nil {
		t.Fatalf("POST multipart %s: %v", path, err)
	}
	return readBody(t, resp)
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, body %q", resp.StatusCode, body)
	}
	return string(body)
}

// answer is a json=1 answer.
type answer struct {
	Status    int             `json:"status"`
	Request   json.RawMessage `json:"request"`
	ErrorText string          `json:"error_text"`
}

func decode(t *testing.T, body string) answer {
	t.Helper()
	var a answer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatalf("answer %q is not JSON: %v", body, err)
	}
	return a
}

// str is the request field as a string (it must be a JSON string).
func (a answer) str(t *testing.T) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(a.Request, &s); err != nil {
		t.Fatalf("request %s is not a string: %v", a.Request, err)
	}
	return s
}

const key = "test-key"

func recaptcha(extra ...string) url.Values {
	v := form("key", key, "method", "userrecaptcha", "googlekey", "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-",
		"pageurl", "https://shop.example/login", "json", "1")
	for i := 0; i+1 < len(extra); i += 2 {
		v.Set(extra[i], extra[i+1])
	}
	return v
}

// submit submits v (json=1) and returns the id, failing on an error answer.
func (b *bundle) submit(t *testing.T, v url.Values) string {
	t.Helper()
	v.Set("json", "1")
	a := decode(t, b.post(t, "/in.php", v))
	if a.Status != 1 {
		t.Fatalf("submit answered %s %s", a.Request, a.ErrorText)
	}
	return a.str(t)
}

// poll polls one id with json=1.
func (b *bundle) poll(t *testing.T, id string) answer {
	t.Helper()
	return decode(t, b.get(t, "/res.php", form("key", key, "action", "get", "id", id, "json", "1")))
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}
