package server_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
)

// boundAnswers is what one solved task looks like at each front.
type boundAnswers struct {
	view  server.TaskView // GET /v1/tasks/{id}
	res   map[string]any  // res.php json=1
	plain string          // res.php
	sol   map[string]any  // getTaskResult's solution
}

// boundAnswers reads task id's answer through every front.
func (b *bundle) boundAnswers(t *testing.T, id string) boundAnswers {
	t.Helper()
	var a boundAnswers
	a.view = b.waitFinal(t, keyQA, id)
	if a.view.Result == nil || a.view.Result.Token == "" {
		t.Fatalf("task %s: %+v, want solved", id, a.view)
	}
	get := url.Values{"key": {keyQA}, "action": {"get"}, "id": {id}}
	a.plain = b.form(t, http.MethodGet, "/res.php", get)
	get.Set("json", "1")
	if err := json.Unmarshal([]byte(b.form(t, http.MethodGet, "/res.php", get)), &a.res); err != nil {
		t.Fatal(err)
	}
	m := b.ct(t, "getTaskResult", `{"clientKey":"`+keyQA+`","taskId":`+id+`}`)
	a.sol, _ = m["solution"].(map[string]any)
	return a
}

// A Turnstile token solved with a user agent reaches the client with
// exactly that user agent through every front (res.php json=1's
// "useragent", getTaskResult's "userAgent", /v1/tasks' bindings), from a
// provider of either protocol; solved without one, it reaches them with
// none, never a made-up one. res.php's plain OK|token has no room for it.
func TestBindingsReachEveryFront(t *testing.T) {
	t.Parallel()
	const ua = "Mozilla/5.0 (X11; Linux x86_64) SolvedBy/7"
	for _, tc := range []struct {
		name       string
		createTask bool
		solvedUA   string
	}{
		{"in.php provider, user agent", false, ua},
		{"in.php provider, none", false, ""},
		{"createTask provider, user agent", true, ua},
		{"createTask provider, none", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{createTask: tc.createTask, sim: func(c *sim.Config) { fastSim(c); c.UserAgent = tc.solvedUA }})
			// One task in flight: an ids= poll answers tokens alone.
			a := b.boundAnswers(t, b.inOK(t, keyQA, turnstile()))
			tok := a.view.Result.Token
			if a.plain != "OK|"+tok {
				t.Errorf("res.php: %q, want OK|%s", a.plain, tok)
			}
			if a.res["status"] != 1.0 || a.res["request"] != tok || a.sol["token"] != tok {
				t.Errorf("res.php json=1 %v, getTaskResult %v: want the token %s", a.res, a.sol, tok)
			}
			if tc.solvedUA == "" {
				if a.view.Bindings != nil || a.res["useragent"] != nil || a.sol["userAgent"] != nil || len(a.res) != 2 || len(a.sol) != 1 {
					t.Errorf("solved without a user agent: /v1/tasks %+v, res.php %v, getTaskResult %v; want none", a.view.Bindings, a.res, a.sol)
				}
				return
			}
			if a.view.Bindings == nil || a.view.Bindings.UserAgent != ua {
				t.Errorf("/v1/tasks bindings %+v, want user_agent %q", a.view.Bindings, ua)
			}
			if a.res["useragent"] != ua {
				t.Errorf("res.php json=1 %v, want useragent %q", a.res, ua)
			}
			if a.sol["userAgent"] != ua {
				t.Errorf("getTaskResult solution %v, want userAgent %q", a.sol, ua)
			}
		})
	}
}

// A reCAPTCHA v2 solved with the client's cookies answers the cookies it
// was solved with (the client's and the one Google set) at every front,
// from a provider of either protocol.
func TestCookiesReachEveryFront(t *testing.T) {
	t.Parallel()
	for _, createTask := range []bool{false, true} {
		name := "in.php provider"
		if createTask {
			name = "createTask provider"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{createTask: createTask, sim: fastSim})
			task := recaptcha()
			task.Set("cookies", "session=s1; lang=en")
			a := b.boundAnswers(t, b.inOK(t, keyQA, task))
			var viewed string
			if a.view.Bindings != nil {
				json.Unmarshal(a.view.Bindings.Cookies, &viewed)
			}
			got, _ := a.res["cookies"].(string)
			if !strings.HasPrefix(got, "session=s1; lang=en; _GRECAPTCHA=09") || a.sol["cookies"] != got || viewed != got {
				t.Errorf("cookies: res.php json=1 %v, getTaskResult %v, /v1/tasks %q; want the task's and _GRECAPTCHA, the same at each", a.res, a.sol, viewed)
			}
			if a.res["request"] != a.view.Result.Token || a.sol["gRecaptchaResponse"] != a.view.Result.Token {
				t.Errorf("token: res.php json=1 %v, getTaskResult %v, want %s", a.res, a.sol, a.view.Result.Token)
			}
		})
	}
}
