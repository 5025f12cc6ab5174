package server_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
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

// closes waits for the server to close the connection after its answer
// to a body it cut short: it reads none of the rest (net/http would
// otherwise read up to 256 KiB of it, for as long as the sender takes,
// before it closes). The minute bounds a server that never closes, it
// is not a measure.
func (h *heldBody) closes(t *testing.T) {
	t.Helper()
	h.conn.SetReadDeadline(time.Now().Add(time.Minute))
	n, err := io.Copy(io.Discard, h.r)
	if errors.Is(err, syscall.ECONNRESET) {
		err = nil // closed with bytes of ours unread
	}
	if err != nil || n != 0 {
		t.Errorf("the connection after the answer to a body cut short: %d more bytes, %v; want it closed", n, err)
	}
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
	testbound.Until(t, "the first byte read", func() bool { return b.bodyBytes(t, "clients") == 1 })
	if got := b.status(t, "POST", "/v1/tasks", keyOther, padded); got != http.StatusBadRequest {
		t.Fatalf("another client beside a declared 900: HTTP %d, want 400 (read)", got)
	}
	// qa holds 800 more (the 299 left of its own 300, 501 of the pool)
	// and 499 more: the pool's 1000 are taken.
	b.holdBody(t, "127.0.0.1", "POST", "/v1/tasks", auth, 801, "["+strings.Repeat(" ", 799))
	b.holdBody(t, "127.0.0.1", "POST", "/v1/tasks", auth, 801, "["+strings.Repeat(" ", 498))
	testbound.Until(t, "qa's bodies read", func() bool { return b.bodyBytes(t, "clients") == 1300 })
	var e apiErr
	h := b.api(t, "POST", "/v1/tasks", keyQA, padded, http.StatusTooManyRequests, &e)
	if !strings.Contains(e.Error, `the clients' request bodies being read fill the server's 1000 bytes, and client "qa" is past its own 300`) || h.Get("Retry-After") == "" {
		t.Errorf("qa past its share with the pool full: %q", e.Error)
	}
	// One that is still coming is answered the same and its connection
	// closed, the rest of it unread.
	more := b.holdBody(t, "127.0.0.1", "POST", "/v1/tasks", auth, 801, "["+strings.Repeat(" ", 99))
	if code, body := more.answer(t); code != http.StatusTooManyRequests || !strings.Contains(body, `client \"qa\" is past its own 300`) {
		t.Errorf("a body of qa still coming, past its share with the pool full: HTTP %d %s", code, body)
	}
	more.closes(t)
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
	if refused != 2 {
		t.Errorf("bodies refused: %v, want 2", refused)
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
	testbound.Until(t, "the first body read", func() bool { return b.bodyBytes(t, "keyless") == 600 })
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
	second.closes(t)
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
	slow.closes(t)
	if n := testutilCounter(t, b, "captchaq_http_bodies_refused_total", map[string]string{"budget": "keyless", "reason": "deadline"}); n != 1 {
		t.Errorf("bodies cut at the deadline: %v, want 1", n)
	}
}

// trickle opens request after request from ip, each its head (request
// line, headers, a Content-Length it never reaches) and then chunk every
// gap, until the server cuts it off (answers and closes) and the next one
// starts; until ctx ends. opened counts the requests.
func (b *bundle) trickle(ctx context.Context, t *testing.T, ip, head string, chunk []byte, gap time.Duration, opened *atomic.Int64) {
	addr := strings.TrimPrefix(b.url, "http://")
	for ctx.Err() == nil {
		c, err := dialerFrom(ip).DialContext(ctx, "tcp", addr)
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("a slow upload from %s: %v", ip, err)
			}
			return
		}
		opened.Add(1)
		closed := make(chan struct{})
		go func() {
			// The server's answer to a body cut short, then its close.
			io.Copy(io.Discard, c)
			close(closed)
		}()
		_, err = io.WriteString(c, head)
		for err == nil {
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-closed:
				err = io.EOF
			case <-time.After(gap):
				_, err = c.Write(chunk)
			}
		}
		c.Close()
		<-closed
	}
}

// The attack on a server as captchaq serve runs it (its
// Listener, its http.Server timeouts) at the defaults' proportions (a
// pool of 16 bodies; a client's own share one body, an address's two; a
// keyless body's 10 s) with bodies a test can fill: 64 connections from
// one address trickle in.php bodies without a key in the query, and 64
// of another client trickle POST /v1/tasks bodies, each declaring the
// largest body and never finishing it; a connection cut off opens
// again. All the while a well-behaved client, from an address of its
// own, submits on in.php with its key in the body (as the 2captcha
// libraries send it) and on POST /v1/tasks, and is answered as usual:
// OK|id for a task of its own, 202 with its task.
func TestSlowUploadsStarveNoOne(t *testing.T) {
	t.Parallel()
	const keyEvil = "evil-key-0001"
	const bodyMax = 64 << 10
	b := setup(t, options{
		clients: []server.Client{{Name: "qa", Key: keyQA}, {Name: "evil", Key: keyEvil}, {Name: "ops", Key: keyAdmin, Admin: true}},
		served:  true,
		server:  func(c *server.Config) { c.MaxBodyBytes, c.MaxBodyInflight = bodyMax, 16*bodyMax },
	})
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() }) // before the server closes
	var keylessOpened, evilOpened atomic.Int64
	keyless := fmt.Sprintf("POST /in.php HTTP/1.1\r\nHost: captchaq.test\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\nmethod=base64&body=", bodyMax)
	evil := fmt.Sprintf("POST /v1/tasks HTTP/1.1\r\nHost: captchaq.test\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n[", keyEvil, bodyMax)
	for range 64 {
		wg.Go(func() {
			b.trickle(ctx, t, "127.0.0.2", keyless, []byte(strings.Repeat("A", 128)), 50*time.Millisecond, &keylessOpened)
		})
		wg.Go(func() {
			b.trickle(ctx, t, "127.0.0.4", evil, []byte(strings.Repeat(" ", 1024)), 50*time.Millisecond, &evilOpened)
		})
	}
	refused := func(budget, reason string) float64 {
		return testutilCounter(t, b, "captchaq_http_bodies_refused_total", map[string]string{"budget": budget, "reason": reason})
	}
	// Both attacks at their bounds: the keyless one its address's share,
	// evil its own share and the clients' pool.
	testbound.Until(t, "the slow uploads at their bounds", func() bool {
		return refused("keyless", "share") > 0 && refused("clients", "budget") > 0
	})
	shareCuts, poolCuts := refused("keyless", "share"), refused("clients", "budget")

	good := clientFrom("127.0.0.3")
	defer good.CloseIdleConnections()
	img := base64.StdEncoding.EncodeToString(make([]byte, 24<<10)) // a 24 KiB image
	okID := regexp.MustCompile(`^OK\|([0-9]+)$`)
	call := func(req *http.Request, want int) string {
		t.Helper()
		resp, err := good.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: HTTP %d %s, want %d", req.Method, req.URL.Path, resp.StatusCode, got, want)
		}
		return string(got)
	}
	// Round after round until every slow upload was, on average, cut off
	// and opened again while the rounds went on: the attack throughout.
	rounds := 0
	deadline := time.Now().Add(2 * time.Minute) // a bound for a hang, not a measure
	for rounds < 10 || refused("keyless", "share")-shareCuts < 64 || refused("clients", "budget")-poolCuts < 64 {
		if time.Now().After(deadline) {
			t.Fatalf("after %d rounds the slow uploads were cut off %v and %v more times, want 64 each", rounds,
				refused("keyless", "share")-shareCuts, refused("clients", "budget")-poolCuts)
		}
		in, _ := http.NewRequest("POST", b.url+"/in.php", strings.NewReader(url.Values{"key": {keyQA}, "method": {"base64"}, "body": {img}}.Encode()))
		in.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		got := call(in, http.StatusOK)
		m := okID.FindStringSubmatch(got)
		if m == nil {
			t.Fatalf("round %d: in.php with the key in the body: %q, want OK|id", rounds, got)
		}
		get, _ := http.NewRequest("GET", b.url+"/v1/tasks/"+m[1], nil)
		get.Header.Set("Authorization", "Bearer "+keyQA)
		var v server.TaskView
		if err := json.Unmarshal([]byte(call(get, http.StatusOK)), &v); err != nil || v.ID != m[1] || v.Client != "qa" || v.Method != "base64" {
			t.Fatalf("round %d: in.php's task %s: %+v %v", rounds, m[1], v, err)
		}
		id := fmt.Sprintf("good-%d", rounds)
		post, _ := http.NewRequest("POST", b.url+"/v1/tasks", strings.NewReader(fmt.Sprintf(`{"id":%q,"method":"base64","params":{"body":%q}}`, id, img)))
		post.Header.Set("Authorization", "Bearer "+keyQA)
		var ans struct{ Tasks []server.TaskView }
		if err := json.Unmarshal([]byte(call(post, http.StatusAccepted)), &ans); err != nil || len(ans.Tasks) != 1 ||
			ans.Tasks[0].ID != id || ans.Tasks[0].Client != "qa" || ans.Tasks[0].Status != captchaq.StatusQueued || ans.Tasks[0].Existed {
			t.Fatalf("round %d: POST /v1/tasks: %+v %v, want task %s queued", rounds, ans, err, id)
		}
		rounds++
	}
	// The attacks were still on: bodies of both being read, and the
	// keyless one never reached the keyless pool (its address's share
	// held it), so nobody else's key in the body met it.
	if k, c := b.bodyBytes(t, "keyless"), b.bodyBytes(t, "clients"); k == 0 || c == 0 {
		t.Errorf("after the rounds: keyless %v, clients %v bytes held; want the slow uploads still there", k, c)
	}
	if n := refused("keyless", "budget"); n != 0 {
		t.Errorf("keyless bodies refused for the keyless pool: %v, want 0", n)
	}
	t.Logf("%d rounds answered; slow uploads opened: %d keyless, %d of evil; cut off at their bounds: %v keyless (address share), %v of evil (clients' pool)",
		rounds, keylessOpened.Load(), evilOpened.Load(), refused("keyless", "share"), refused("clients", "budget"))
}
