package server_test

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/server"
)

// A source address on loopback (127.0.0.2, …): Linux routes all of
// 127.0.0.0/8 to loopback, so one test can be several hosts.
func dialerFrom(ip string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
}

// clientFrom is an HTTP client whose connections come from ip.
func clientFrom(ip string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: dialerFrom(ip).DialContext}}
}

// heldBody is a request sent on a connection of its own whose body is
// never finished: the server reads what came and waits for the rest.
type heldBody struct {
	conn net.Conn
	r    *bufio.Reader
}

// holdBody sends method path with headers, a Content-Length of declared
// and the first bytes of the body, from ip, and leaves it open until the
// test ends (or release).
func (b *bundle) holdBody(t *testing.T, ip, method, path string, headers map[string]string, declared int, first string) *heldBody {
	t.Helper()
	c, err := dialerFrom(ip).Dial("tcp", strings.TrimPrefix(b.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s %s HTTP/1.1\r\nHost: captchaq.test\r\nContent-Length: %d\r\n", method, path, declared)
	for k, v := range headers {
		fmt.Fprintf(&sb, "%s: %s\r\n", k, v)
	}
	sb.WriteString("\r\n" + first)
	if _, err := io.WriteString(c, sb.String()); err != nil {
		t.Fatal(err)
	}
	return &heldBody{conn: c, r: bufio.NewReader(c)}
}

// answer reads the server's answer to a held body it cut short.
func (h *heldBody) answer(t *testing.T) (int, string) {
	t.Helper()
	// A bound for a server that never answers, not a measure.
	h.conn.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(h.r, nil)
	if err != nil {
		t.Fatalf("no answer to the held body: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// bodyBytes is what the server holds of the bodies being read, by budget.
func (b *bundle) bodyBytes(t *testing.T, budget string) float64 {
	t.Helper()
	mfs, err := b.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "captchaq_http_body_bytes" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "budget" && l.GetValue() == budget {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no captchaq_http_body_bytes{budget=%q}", budget)
	return 0
}

// Bodies hold what has arrived, not what they declare; a client's bodies
// take its own share first, then the pool all clients share. A client
// past its share meets the pool's bound; one within its share never
// meets another's bytes.
func TestClientBodiesCountedAsTheyArrive(t *testing.T) {
	t.Parallel()
	b := setup(t, options{server: func(c *server.Config) {
		c.MaxBodyBytes, c.MaxBodyInflight, c.MaxBodyPerClient = 800, 1000, 300
	}})
	auth := map[string]string{"Authorization": "Bearer " + keyQA}
	padded := strings.Repeat(" ", 296) + "null" // 300 bytes, read whole: 400
	// A body that declares 900 and sends one byte holds one byte.
	b.holdBody(t, "127.0.0.1", "POST", "/v1/tasks", auth, 900, "[")
	until(t, "the first byte read", func() bool { return b.bodyBytes(t, "clients") == 1 })
	if got := b.status(t, "POST", "/v1/tasks", keyOther, padded); got != http.StatusBadRequest {
		t.Fatalf("another client beside a declared 900: HTTP %d, want 400 (read)", got)
	}
	// qa holds 800 more (the 299 left of its own 300, 501 of the pool)
	// and 499 more: the pool's 1000 are taken.
	b.holdBody(t, "127.0.0.1", "POST", "/v1/tasks", auth, 801, "["+strings.Repeat(" ", 799))
	b.holdBody(t, "127.0.0.1", "POST", "/v1/tasks", auth, 801, "["+strings.Repeat(" ", 498))
	until(t, "qa's bodies read", func() bool { return b.bodyBytes(t, "clients") == 1300 })
	var e apiErr
	h := b.api(t, "POST", "/v1/tasks", keyQA, padded, http.StatusTooManyRequests, &e)
	if !strings.Contains(e.Error, `the clients' request bodies being read fill the server's 1000 bytes, and client "qa" is past its own 300`) || h.Get("Retry-After") == "" {
		t.Errorf("qa past its share with the pool full: %q", e.Error)
	}
	// other is within its own share: never refused for qa's bytes, on
	// the API and on in.php with its key in the query.
	if got := b.status(t, "POST", "/v1/tasks", keyOther, padded); got != http.StatusBadRequest {
		t.Errorf("another client within its share: HTTP %d, want 400 (read)", got)
	}
	v := turnstile()
	v.Set("pad", strings.Repeat("x", 100))
	in, _ := http.NewRequest("POST", b.url+"/in.php?key="+keyOther, strings.NewReader(v.Encode()))
	in.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if got := b.do(t, in, http.StatusOK); !strings.HasPrefix(got, "OK|") {
		t.Errorf("in.php?key= of another client within its share: %q", got)
	}
	refused := testutilCounter(t, b, "captchaq_http_bodies_refused_total", map[string]string{"budget": "clients", "reason": "budget"})
	if refused != 1 {
		t.Errorf("bodies refused: %v, want 1", refused)
	}
}

// testutilCounter reads one counter of the server's registry.
func testutilCounter(t *testing.T, b *bundle, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := b.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// Bodies whose key is only inside them take a share of their source
// address: one address cannot hold another's room, nor the clients' with
// a key in the query string; and one that does not arrive in time is cut
// off with the fix in the answer.
func TestKeylessBodiesPerAddress(t *testing.T) {
	t.Parallel()
	b := setup(t, options{server: func(c *server.Config) {
		c.MaxBodyBytes, c.MaxBodyPerAddress, c.MaxBodyInflight = 800, 1000, 5000
		// The answer to a body cut short does not wait for its rest.
		c.KeylessBodyTimeout = time.Hour
	}})
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	// 127.0.0.2 holds 600 bytes, then sends 600 more in another body:
	// past its share of 1000, that one is cut short.
	b.holdBody(t, "127.0.0.2", "POST", "/in.php", form, 800, "method=turnstile&pad="+strings.Repeat("x", 579))
	until(t, "the first body read", func() bool { return b.bodyBytes(t, "keyless") == 600 })
	second := b.holdBody(t, "127.0.0.2", "POST", "/in.php?json=1", form, 800, "method=turnstile&pad="+strings.Repeat("x", 579))
	code, body := second.answer(t)
	var ans struct {
		Request string `json:"request"`
		Text    string `json:"error_text"`
	}
	json.Unmarshal([]byte(body), &ans)
	if code != http.StatusOK || ans.Request != "ERROR_NO_SLOT_AVAILABLE" || !strings.Contains(ans.Text, "this address is sending 1000 bytes of request bodies whose key is only inside them, its share: send key= in the query string") {
		t.Errorf("a body past its address's share: HTTP %d %s", code, body)
	}
	// Another address, its key in the body as the 2captcha libraries
	// send it: answered.
	v := turnstile()
	v.Set("key", keyQA)
	v.Set("pad", strings.Repeat("x", 600))
	resp, err := clientFrom("127.0.0.3").PostForm(b.url+"/in.php", v)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(string(got), "OK|") {
		t.Errorf("in.php from another address: %q", got)
	}
	// The same address with the key in the query: the client's share.
	in, _ := http.NewRequest("POST", b.url+"/in.php?key="+keyQA, strings.NewReader(url.Values{"method": {"turnstile"}, "sitekey": {"0x4AAAAAAA"}, "pageurl": {"https://shop.example/x"}, "pad": {strings.Repeat("x", 600)}}.Encode()))
	in.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = clientFrom("127.0.0.2").Do(in)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(string(got), "OK|") {
		t.Errorf("in.php?key= from the address at its keyless share: %q", got)
	}
}

// A body whose key is only inside it must arrive within
// KeylessBodyTimeout: one that stalls is cut off, and the answer says how
// to send a slow upload.
func TestKeylessBodyDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t, options{server: func(c *server.Config) { c.KeylessBodyTimeout = 100 * time.Millisecond }})
	slow := b.holdBody(t, "127.0.0.1", "POST", "/in.php?json=1", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 800, "method=turnstile&")
	code, body := slow.answer(t)
	if code != http.StatusOK || !strings.Contains(body, "ERROR_NO_SLOT_AVAILABLE") || !strings.Contains(body, "the request body did not arrive within 100ms: a body whose key is only inside it must come at once; send key= in the query string for a slow upload") {
		t.Errorf("a stalled keyless body: HTTP %d %s", code, body)
	}
	if n := testutilCounter(t, b, "captchaq_http_bodies_refused_total", map[string]string{"budget": "keyless", "reason": "deadline"}); n != 1 {
		t.Errorf("bodies cut at the deadline: %v, want 1", n)
	}
}

// The attack, scaled down: 64 slow uploads without a key (in the
// query) from one address and 64 slow uploads of another client, each
// sending half of what it declares and then waiting. Meanwhile a
// well-behaved client, from an address of its own, is answered as usual
// on in.php with its key in the body (as the 2captcha libraries send it)
// and on POST /v1/tasks, again and again.
func TestSlowUploadsStarveNoOne(t *testing.T) {
	t.Parallel()
	const keyEvil = "evil-key-0001"
	const bodyMax = 256 << 10
	b := setup(t, options{
		clients: []server.Client{{Name: "qa", Key: keyQA}, {Name: "evil", Key: keyEvil}, {Name: "ops", Key: keyAdmin, Admin: true}},
		server: func(c *server.Config) {
			// The defaults' proportions (a pool of 16 bodies; a client's
			// own share one body, an address's two) at a size a test can
			// hold; the deadline has a test of its own.
			c.MaxBodyBytes, c.MaxBodyInflight = bodyMax, 16*bodyMax
			c.KeylessBodyTimeout = time.Hour
		},
	})
	half := bodyMax / 2
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	for range 64 {
		b.holdBody(t, "127.0.0.2", "POST", "/in.php", form, bodyMax, "method=base64&body="+strings.Repeat("A", half-19))
		b.holdBody(t, "127.0.0.4", "POST", "/v1/tasks", map[string]string{"Authorization": "Bearer " + keyEvil}, bodyMax, "["+strings.Repeat(" ", half-1))
	}
	// Both attacks have hit their bounds: the keyless one its address's
	// share, evil its share and the clients' pool.
	until(t, "the slow uploads at their bounds", func() bool {
		return testutilCounter(t, b, "captchaq_http_bodies_refused_total", map[string]string{"budget": "keyless", "reason": "share"}) > 0 &&
			testutilCounter(t, b, "captchaq_http_bodies_refused_total", map[string]string{"budget": "clients", "reason": "budget"}) > 0
	})
	if held := b.bodyBytes(t, "clients"); held < 16*bodyMax {
		t.Fatalf("evil holds %v bytes, want the pool full (%d) and more", held, 16*bodyMax)
	}
	good := clientFrom("127.0.0.3")
	img := base64.StdEncoding.EncodeToString(make([]byte, 64<<10)) // a 64 KiB image
	for round := range 5 {
		v := url.Values{"key": {keyQA}, "method": {"base64"}, "body": {img}}
		resp, err := good.PostForm(b.url+"/in.php", v)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasPrefix(string(got), "OK|") {
			t.Errorf("round %d: in.php with the key in the body: %q", round, got)
		}
		task := fmt.Sprintf(`{"id":"good-%d","method":"base64","params":{"body":%q}}`, round, img)
		req, _ := http.NewRequest("POST", b.url+"/v1/tasks", strings.NewReader(task))
		req.Header.Set("Authorization", "Bearer "+keyQA)
		resp, err = good.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Errorf("round %d: POST /v1/tasks: HTTP %d %s", round, resp.StatusCode, got)
		}
	}
	// The attacks held throughout: bodies of both still being read.
	if k, c := b.bodyBytes(t, "keyless"), b.bodyBytes(t, "clients"); k == 0 || c < 16*bodyMax {
		t.Errorf("after the rounds: keyless %v, clients %v bytes held; want the slow uploads still there", k, c)
	}
}
