package server

import (
	"context"
	"encoding/json"
	"net/url"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
)

// What a solved token is bound to (its user agent, cookies, proxy) in the
// answers that are not GET /v1/tasks/{id}'s or a single res.php poll's:
// pingbacks, events and res.php's ids= poll.

// apiBindings are what res's token is bound to (createtask.BindingsFor of
// its answer and the task's params), nil for none or no token.
func apiBindings(res captchaq.Result, params map[string]string) *Bindings {
	b := createtask.BindingsFor(res.Kind, res.Answer, params)
	if res.Token == "" || b.Empty() {
		return nil
	}
	return &Bindings{UserAgent: b.UserAgent, Cookies: b.Cookies, Proxy: b.Proxy}
}

// resultJSON is a Result as the API's pushes send it (a pingback, an
// event): the Result's fields and its token's bindings beside them, as
// GET /v1/tasks/{id} shows them.
type resultJSON struct {
	captchaq.Result
	Bindings *Bindings `json:"bindings,omitempty"`
}

// formPingbackBody is an in.php task's pingback: id and code (the token,
// or the failure's code), as 2captcha sends it, and what the token is
// bound to under res.php json=1's names: useragent, cookies and proxy
// (a JSON string as its text, else the JSON); none it is not bound to.
func formPingbackBody(res captchaq.Result, local string, params map[string]string) []byte {
	v := url.Values{"id": {local}, "code": {res.Token}}
	if res.Status != captchaq.StatusSolved {
		code, _ := failureCode(res)
		v.Set("code", code)
		return []byte(v.Encode())
	}
	m := map[string]any{}
	createtask.BindingsFor(res.Kind, res.Answer, params).AddTo(m, "useragent")
	for k, x := range m {
		switch x := x.(type) {
		case string:
			v.Set(k, x)
		case json.RawMessage:
			var s string
			if json.Unmarshal(x, &s) != nil {
				s = string(x)
			}
			v.Set(k, s)
		}
	}
	return []byte(v.Encode())
}

// eventBindings are the bindings of a result on its way to an event
// stream (id is its store id). A token of a kind solved with the task's
// user agent, answered without one, reads the task for it.
func (s *apiSide) eventBindings(ctx context.Context, id string, res captchaq.Result) *Bindings {
	var params map[string]string
	if res.Token != "" && createtask.SolvedWithTaskUserAgent(res.Kind) && provider.BindingsOf(res.Answer).UserAgent == "" {
		if rec, err := s.backend.Get(ctx, id); err == nil {
			params = rec.Task.Params
		}
	}
	return apiBindings(res, params)
}
