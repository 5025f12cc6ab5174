package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/internal/tasktest"
)

// TestValidateTableFrontAndAPI: in.php and the JSON API accept and refuse
// the shared table's tasks: the API with the table's code, in.php with the
// protocol's code for it.
func TestValidateTableFrontAndAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for i, c := range tasktest.Cases {
		form := url.Values{"key": {keyQA}, "method": {c.Method}}
		for k, v := range c.Params {
			form.Set(k, v)
		}
		got := b.form(t, http.MethodPost, "/in.php", form)
		switch {
		case c.Code == "" && !strings.HasPrefix(got, "OK|"):
			t.Errorf("%s: in.php = %q, want OK|id", c.Name, got)
		case c.Code != "" && got != c.FrontCode:
			t.Errorf("%s: in.php = %q, want %s", c.Name, got, c.FrontCode)
		}

		var e struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}
		want := http.StatusBadRequest
		if c.Code == "" {
			want = http.StatusAccepted
		}
		b.api(t, "POST", "/v1/tasks", keyQA, c.Line("api-"+string(rune('a'+i))), want, &e)
		if c.Code != "" && (e.Code != c.Code || !strings.Contains(e.Error, c.Field)) {
			t.Errorf("%s: API refusal %+v, want code %s naming %q", c.Name, e, c.Code, c.Field)
		}
	}
}
