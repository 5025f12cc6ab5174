package server_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/server"
)

func TestAPIKnownIDWithOtherTaskIs409AndExpiredTokensAreWithheld(t *testing.T) {
	t.Parallel()
	mem := captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})
	b := setup(t, options{threads: 2, server: func(c *server.Config) { c.Queue.Store = mem }})
	var c created
	b.api(t, "POST", "/v1/tasks", keyQA, apiTurnstile("a"), http.StatusAccepted, &c)
	var first server.TaskView
	b.api(t, "GET", "/v1/tasks/a?wait=20s", keyQA, "", http.StatusOK, &first)
	if first.Status != captchaq.StatusSolved || first.Result == nil || first.Result.Token == "" {
		t.Fatalf("a: %+v", first)
	}
	// Same id, same task: the same answer.
	b.api(t, "POST", "/v1/tasks", keyQA, apiTurnstile("a"), http.StatusAccepted, &c)
	if !c.Tasks[0].Existed || c.Tasks[0].Result == nil || c.Tasks[0].Result.Token != first.Result.Token {
		t.Fatalf("same task again: %+v", c.Tasks[0])
	}
	// Same id, another task: 409, and nothing of the first task's.
	other := `{"id":"a","method":"turnstile","params":{"sitekey":"0x4BBBBBBB","pageurl":"https://shop.example/checkout"}}`
	var e map[string]any
	b.api(t, "POST", "/v1/tasks", keyQA, "["+apiTurnstile("fresh")+","+other+"]", http.StatusConflict, &e)
	msg, _ := e["error"].(string)
	if e["code"] != captchaq.CodeIDConflict || e["field"] != "id" || e["index"] != 1.0 ||
		!strings.Contains(msg, `id "a" already names another task (params.sitekey differs)`) || strings.Contains(msg, first.Result.Token) {
		t.Fatalf("409 body %v", e)
	}
	if _, err := mem.Get(context.Background(), "qa/fresh"); err == nil {
		t.Error("a task of the refused request was accepted")
	}

	// The token expires: GET and res.php withhold it, a POST solves it again.
	expire(t, mem, "qa/a")
	var v, solved server.TaskView
	b.api(t, "GET", "/v1/tasks/a", keyQA, "", http.StatusOK, &v)
	if !v.Expired || v.Result == nil || v.Result.Token != "" {
		t.Fatalf("GET of an expired result: %+v", v)
	}
	if got := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"get"}, "id": {"a"}}); got != server.CodeTokenExpired {
		t.Fatalf("res.php of an expired result: %q", got)
	}
	var again created
	b.api(t, "POST", "/v1/tasks", keyQA, apiTurnstile("a"), http.StatusAccepted, &again)
	if again.Tasks[0].Existed || again.Tasks[0].Status != captchaq.StatusQueued {
		t.Fatalf("an expired task was answered as it was: %+v", again.Tasks[0])
	}
	b.api(t, "GET", "/v1/tasks/a?wait=20s", keyQA, "", http.StatusOK, &solved)
	if solved.Status != captchaq.StatusSolved || solved.Expired || solved.Result.Token == "" || !solved.Result.ExpiresAt.After(time.Now()) {
		t.Fatalf("a solved again: %+v", solved)
	}
}

// Ids the server hands out (in.php's, and the API's for a task without
// one) are a permutation of a counter that starts at the clock. After a restart whose clock reads earlier than
// the last run's, the ids its Store already holds are skipped: a new task
// never gets an old task's id, and so never its answer or a conflict.
func TestServerIDsSkipStoredTasks(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	old := b.inOK(t, keyQA, turnstile())
	first := b.waitFinal(t, keyQA, old)
	if first.Status != captchaq.StatusSolved || first.Result.Token == "" {
		t.Fatalf("%s: %+v", old, first)
	}

	// in.php, the same task: a new id, not the old one's token.
	server.SetNextID(b.srv, old)
	again := b.inOK(t, keyQA, turnstile())
	if again == old {
		t.Fatalf("in.php handed out %s again", old)
	}
	if got := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"get"}, "id": {again}}); got == "OK|"+first.Result.Token {
		t.Fatalf("res.php answers the new task %s with the old task's token", again)
	}
	// in.php, another task: accepted under a new id, not refused.
	server.SetNextID(b.srv, old)
	if id := b.inOK(t, keyQA, recaptcha()); id == old {
		t.Fatalf("in.php handed out %s again", old)
	}
	// The API, a task without an id: new, not the old one as it is.
	server.SetNextID(b.srv, old)
	var c created
	b.api(t, "POST", "/v1/tasks", keyQA, `{"method":"turnstile","params":{"sitekey":"0x4AAAAAAA","pageurl":"https://shop.example/checkout"}}`, http.StatusAccepted, &c)
	if v := c.Tasks[0]; v.ID == old || v.Existed || v.Status != captchaq.StatusQueued {
		t.Fatalf("API task without an id: %+v", v)
	}
	// Another client's ids are its own: its task may take that number.
	server.SetNextID(b.srv, old)
	if id := b.inOK(t, keyOther, turnstile()); id != old {
		t.Errorf("client other got %s, want %s (no task of its own has it)", id, old)
	}
}
