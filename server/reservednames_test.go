package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/server"
)

// The request of the issue: soft.id, "header acao" and pingback\0, which a
// provider parsing forms as PHP does reads as soft_id, header_acao and
// pingback (the operator's soft_id, the answer's CORS header, where the
// answer goes), are refused at every front, naming the param, before any
// task is taken: POST /v1/tasks 400, in.php ERROR_BAD_PARAMETERS,
// createTask ERROR_BAD_PARAMETERS. Each door refuses a NUL in any name
// first; the other spellings are the reserved-name check's.
func TestReservedNamesInEveryFoldedForm(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	// The NUL is refused first, as every door refuses a NUL in any text.
	const params = `"sitekey":"0x4","pageurl":"https://a.example/","soft.id":"4242","header acao":"1","pingback\u0000":"https://attacker.example/cb"`
	b.apiRefuses(t, `{"method":"turnstile","params":{`+params+`}}`, "params", `name "pingback\x00": holds a NUL byte`)
	for _, c := range []struct{ name, field, text string }{
		{"soft.id", "params.soft.id", `params.soft.id: "soft.id" is the protocol's own field, not a task param; a provider reads "soft.id" as "soft_id"`},
		{"header acao", "params.header acao", `params.header acao: "header acao" is the protocol's own field, not a task param; a provider reads "header acao" as "header_acao"`},
		{"Pingback[]", "params.Pingback[]", `a provider reads "Pingback[]" as "pingback"`},
		{" KEY ", "params. KEY ", `a provider reads " KEY " as "key"`},
		{"pingback\x00", "params", `params: name "pingback\x00": holds a NUL byte`},
	} {
		body, _ := json.Marshal(map[string]any{"method": "turnstile", "params": map[string]string{
			"sitekey": "0x4", "pageurl": "https://a.example/", c.name: "https://attacker.example/cb",
		}})
		b.apiRefuses(t, string(body), c.field, c.text)

		v := turnstile()
		v.Set("key", keyQA)
		v.Set("json", "1")
		v.Set(c.name, "https://attacker.example/cb")
		var in struct {
			Status  int    `json:"status"`
			Request string `json:"request"`
			Text    string `json:"error_text"`
		}
		if err := json.Unmarshal([]byte(b.form(t, http.MethodPost, "/in.php", v)), &in); err != nil {
			t.Fatal(err)
		}
		if in.Status != 0 || in.Request != "ERROR_BAD_PARAMETERS" || !strings.Contains(in.Text, c.text) {
			t.Errorf("in.php with %q: %+v, want ERROR_BAD_PARAMETERS saying %s", c.name, in, c.text)
		}
	}
	m := b.ct(t, "createTask", `{"clientKey":"`+keyQA+`","task":{"type":"TurnstileTaskProxyless","websiteURL":"https://a.example/","websiteKey":"0x4",`+
		`"soft.id":"4242","header acao":"1","pingback\u0000":"https://attacker.example/cb"}}`)
	if m["errorId"] == 0.0 || m["errorCode"] != "ERROR_BAD_PARAMETERS" || !strings.HasPrefix(m["errorDescription"].(string), "task.header acao: ") {
		t.Errorf("createTask: %v, want ERROR_BAD_PARAMETERS naming task.header acao", m)
	}
	var stats server.Stats
	b.api(t, "GET", "/v1/stats", keyQA, "", http.StatusOK, &stats)
	if len(stats.Clients) != 1 || stats.Clients[0].Accepted != 0 {
		t.Errorf("stats %+v, want no task taken", stats.Clients)
	}
}
