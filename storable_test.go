package captchaq_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/captchaq/captchaq"
)

// storableTask is a valid task each case of TestValidateStorable changes
// in one field.
func storableTask() captchaq.Task {
	return captchaq.Task{ID: "s-1", Method: "turnstile", Tenant: "shop",
		Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "https://shop.example/checkout"}}
}

// TestValidateStorable: Task.Validate refuses, with a TaskError naming the
// field, every text a store cannot hold as given (PostgreSQL refuses a NUL
// byte and invalid UTF-8; the stores' JSON of Params turns invalid UTF-8
// into U+FFFD), and ids and tenants over what PostgreSQL indexes; at the
// limits it accepts. Each door validates with it before it publishes or
// submits anything.
func TestValidateStorable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(*captchaq.Task)
		msg    string // "": accepted
	}{
		{"NUL in id", func(t *captchaq.Task) { t.ID = "n1\x00" },
			"id: holds a NUL byte: send text without NUL bytes"},
		{"invalid UTF-8 in id", func(t *captchaq.Task) { t.ID = "n\xff1" },
			"id: is not valid UTF-8: send UTF-8 text"},
		{"NUL in method", func(t *captchaq.Task) { t.Method = "turnstile\x00" },
			"method: holds a NUL byte: send text without NUL bytes"},
		{"NUL in tenant", func(t *captchaq.Task) { t.Tenant = "\x00shop" },
			"tenant: holds a NUL byte: send text without NUL bytes"},
		{"invalid UTF-8 in tenant", func(t *captchaq.Task) { t.Tenant = "sh\xc3op" },
			"tenant: is not valid UTF-8: send UTF-8 text"},
		{"NUL in proxy", func(t *captchaq.Task) { t.Proxy = "user:pa\x00ss@10.0.0.1:3128"; t.ProxyType = "HTTP" },
			"proxy: holds a NUL byte: send text without NUL bytes"},
		{"invalid UTF-8 in proxy", func(t *captchaq.Task) { t.Proxy = "user:p\xfe@10.0.0.1:3128"; t.ProxyType = "HTTP" },
			"proxy: is not valid UTF-8: send UTF-8 text"},
		{"NUL in proxytype", func(t *captchaq.Task) { t.Proxy = "10.0.0.1:3128"; t.ProxyType = "HTTP\x00" },
			"proxytype: holds a NUL byte: send text without NUL bytes"},
		{"NUL in pingback", func(t *captchaq.Task) { t.Pingback = "https://hooks.example/\x00" },
			"pingback: holds a NUL byte: send text without NUL bytes"},
		{"NUL in a param name", func(t *captchaq.Task) { t.Params["action\x00"] = "login" },
			`params: name "action\x00": holds a NUL byte: send text without NUL bytes`},
		{"invalid UTF-8 in a param name", func(t *captchaq.Task) { t.Params["act\x80ion"] = "login" },
			`params: name "act\x80ion": is not valid UTF-8: send UTF-8 text`},
		{"NUL in a param value", func(t *captchaq.Task) { t.Params["sitekey"] = "0x4A\x00AA" },
			"params.sitekey: holds a NUL byte: send text without NUL bytes"},
		{"invalid UTF-8 in a param value", func(t *captchaq.Task) { t.Params["sitekey"] = "0x4AAA\xed\xa0\x80" },
			`params.sitekey: is not valid UTF-8: send UTF-8 text`},
		{"id over the limit", func(t *captchaq.Task) { t.ID = strings.Repeat("i", captchaq.MaxIDBytes+1) },
			"id: 2049 bytes; at most 2048 (the stores index it): use a shorter id"},
		{"tenant over the limit", func(t *captchaq.Task) { t.Tenant = strings.Repeat("t", captchaq.MaxIDBytes+1) },
			"tenant: 2049 bytes; at most 2048 (the stores index it): use a shorter tenant"},
		{"params over the limit", func(t *captchaq.Task) {
			t.Params["data"] = strings.Repeat("d", captchaq.MaxParamsBytes-len("sitekeypageurldata0x4AAAhttps://shop.example/checkout")+1)
		}, "params: 134217729 bytes in names and values; at most 134217728: send a smaller task"},
		{"two fields", func(t *captchaq.Task) { t.ID = "n1\x00"; t.Params["sitekey"] = "\xff" },
			`id: holds a NUL byte: send text without NUL bytes; params.sitekey: is not valid UTF-8: send UTF-8 text`},

		{"id and tenant at the limit", func(t *captchaq.Task) {
			t.ID = strings.Repeat("i", captchaq.MaxIDBytes)
			t.Tenant = strings.Repeat("t", captchaq.MaxIDBytes)
		}, ""},
		{"params at the limit", func(t *captchaq.Task) {
			t.Params["data"] = strings.Repeat("d", captchaq.MaxParamsBytes-len("sitekeypageurldata0x4AAAhttps://shop.example/checkout"))
		}, ""},
		{"text that is not ASCII", func(t *captchaq.Task) {
			t.ID, t.Tenant, t.Params["data"], t.Params["ключ"] = "é-1", "магазин", "\uFFFD\x01\x7f😀", "значение"
		}, ""},
	}
	for _, c := range cases {
		task := storableTask()
		c.change(&task)
		err := task.Validate()
		if c.msg == "" {
			if err != nil {
				t.Errorf("%s: Validate = %v; want nil", c.name, err)
			}
			continue
		}
		var te *captchaq.TaskError
		if !errors.As(err, &te) || te.Code != captchaq.CodeInvalidTask || te.Msg != c.msg {
			t.Errorf("%s: Validate = %v;\nwant a TaskError %s: %s", c.name, err, captchaq.CodeInvalidTask, c.msg)
		}
	}
}
