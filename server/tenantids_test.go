package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/amqp"
	"github.com/captchaq/captchaq/server"
)

// The gateway is the IDSource of a front's replicas: without IDKey it
// would silently not be one.
var _ server.IDSource = (*amqp.Gateway)(nil)

// checkIDs asserts what a client may see of ids handed out in a row:
// numeric without a leading 0, above 0 and below 2^53 (a JSON number a
// JavaScript client reads exactly), all distinct, and not a counter:
// consecutive ids differ by less than 2^20 at most a handful of times
// (for random 52-bit ids the chance of one such pair is 2^-32).
func checkIDs(t *testing.T, who string, ids []string) {
	t.Helper()
	seen := map[uint64]bool{}
	close := 0
	var last uint64
	for i, id := range ids {
		n, err := strconv.ParseUint(id, 10, 64)
		if err != nil || id[0] == '0' || n == 0 || n >= 1<<53 {
			t.Fatalf("%s: id %d is %q: want a number in [1, 2^53) without a leading 0", who, i, id)
		}
		if seen[n] {
			t.Fatalf("%s: id %s handed out twice", who, id)
		}
		seen[n] = true
		if i > 0 && max(n, last)-min(n, last) < 1<<20 {
			close++
		}
		last = n
	}
	if close > 3 {
		t.Errorf("%s: %d of %d consecutive ids differ by less than 2^20: they count", who, close, len(ids)-1)
	}
}

// Two clients submit in turn through in.php, as the issue did: client
// qa's consecutive ids (1000 of them) do not grow by other's count, or
// at all; they are numbers a 2captcha client takes.
func TestInPHPIDsTellNothingOfOtherClients(t *testing.T) {
	t.Parallel()
	b := setup(t, options{threads: 50})
	const n = 1000
	var qa, other []string
	for range n {
		qa = append(qa, b.inOK(t, keyQA, turnstile()))
		other = append(other, b.inOK(t, keyOther, turnstile()))
	}
	checkIDs(t, "qa", qa)
	checkIDs(t, "other", other)
	// Each id names the task it was handed out for.
	got := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"get"}, "id": {qa[n-1]}})
	if got != "CAPCHA_NOT_READY" && !strings.HasPrefix(got, "OK|") {
		t.Errorf("res.php of %s: %q", qa[n-1], got)
	}
}

// sharedIDs is the IDSource of a front: one counter handed out in blocks
// to every replica, one key.
type sharedIDs struct {
	mu   sync.Mutex
	next uint64
	key  []byte
}

func (s *sharedIDs) block() (uint64, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := s.next
	s.next += 10
	return first, 10
}

// idBackend is the server's own Backend with a front's IDSource.
type idBackend struct {
	server.Backend
	ids *sharedIDs
}

func (b idBackend) IDBlock(context.Context) (uint64, int, error) {
	first, n := b.ids.block()
	return first, n, nil
}

func (b idBackend) IDKey(context.Context) ([]byte, error) { return b.ids.key, nil }

// Two replicas of a front take blocks of one shared counter: the ids they
// hand out (to createTask clients too, as JSON integers) are distinct
// across both, yet neither counts, and both permute the counter with the
// source's key alike.
func TestSharedIDBlocksArePermuted(t *testing.T) {
	t.Parallel()
	ids := &sharedIDs{next: 1_800_000_000_000_000, key: []byte("0123456789abcdef")}
	var replicas [2]*bundle
	for i := range replicas {
		replicas[i] = setup(t, options{server: func(c *server.Config) {
			c.Backend = idBackend{Backend: server.NewLocalBackend(c.Queue, 0), ids: ids}
			c.Queue = captchaq.Config{}
		}})
	}
	var all, fromA []string
	for i := range 300 {
		r := replicas[i%2]
		// ctCreate reads taskId as a JavaScript client does, a float64.
		id := r.ctCreate(t, keyQA, `{"type":"TurnstileTaskProxyless","websiteURL":"https://shop.example/checkout","websiteKey":"0x4AAAAAAA"}`)
		all = append(all, id)
		if i%2 == 0 {
			fromA = append(fromA, id)
		}
	}
	checkIDs(t, "both replicas", all)
	checkIDs(t, "replica A", fromA)
	for _, id := range all {
		n, _ := strconv.ParseUint(id, 10, 64)
		c, ok := server.IDCounter(replicas[0].srv, n)
		if c2, ok2 := server.IDCounter(replicas[1].srv, n); !ok || !ok2 || c != c2 || c < 1_800_000_000_000_000 || c >= ids.next {
			t.Fatalf("id %s: counter %d (%v) at A, %d (%v) at B: want one counter of the shared blocks", id, c, ok, c2, ok2)
		}
	}
}

// A client sees its task's answer, never the provider's captcha id (the
// operator's account's; reports go through the server by the task's id):
// not in GET /v1/tasks/{id}, its event or its pingback. An admin does.
func TestClientsSeeNoCaptchaID(t *testing.T) {
	t.Parallel()
	pingback := make(chan string, 1)
	rx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		pingback <- string(body)
	}))
	defer rx.Close()
	b := setup(t, options{})
	events := b.events(t, keyQA)
	b.api(t, "POST", "/v1/tasks", keyQA, `{"id":"p1","method":"turnstile","params":{"sitekey":"0x4A","pageurl":"https://a.example"},"pingback":"`+rx.URL+`/api"}`, http.StatusAccepted, nil)
	raw := func(key, id string) string {
		req := mustReq("GET", b.url+"/v1/tasks/"+url.PathEscape(id)+"?wait=20s")
		req.Header.Set("Authorization", "Bearer "+key)
		return b.do(t, req, http.StatusOK)
	}
	got := raw(keyQA, "p1")
	var v server.TaskView
	if err := json.Unmarshal([]byte(got), &v); err != nil || v.Status != captchaq.StatusSolved || v.Result.Token == "" || strings.Contains(got, "captcha_id") {
		t.Errorf("the client's GET: %s", got)
	}
	if ev := events.next(t); ev.ID != "p1" || ev.Token != v.Result.Token || ev.CaptchaID != "" {
		t.Errorf("the client's event: %+v", ev)
	}
	select {
	case body := <-pingback:
		if !strings.Contains(body, v.Result.Token) || strings.Contains(body, "captcha_id") {
			t.Errorf("the client's pingback: %s", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pingback did not arrive")
	}
	var admin server.TaskView
	if err := json.Unmarshal([]byte(raw(keyAdmin, "qa/p1")), &admin); err != nil || admin.Result == nil || admin.Result.CaptchaID == "" {
		t.Errorf("the admin's GET: %+v %v, want the captcha id", admin, err)
	}
}
