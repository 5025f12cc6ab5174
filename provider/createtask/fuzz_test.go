package createtask

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/captchaq/captchaq/provider"
)

// Whatever a client sends as its task, ParseTask answers a task of a known
// method or a Fault with a code of the table, never a panic; a task it
// takes is one TaskObject can send on, and reads back the same.
func FuzzParseTask(f *testing.F) {
	for _, tc := range parseCases {
		f.Add([]byte(tc.task))
	}
	for _, s := range []string{``, `null`, `[]`, `{"type":""}`, `{"type":"GeeTestTask","version":4,"initParameters":[]}`,
		`{"type":"RecaptchaV2Task","proxyType":"http","proxyAddress":"::1","proxyPort":"80"}`, `{"type":"ImageToTextTask","minLength":1e309}`,
		`{"type":"TurnstileTaskProxyless","websiteURL":"https://a.example/","websiteKey":"k","action":" "}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		task, fl := ParseTask(raw)
		if fl != nil {
			if fl.ID == 0 || fl.Code == "" || fl.Description == "" {
				t.Fatalf("fault %+v", fl)
			}
			return
		}
		if !slices.Contains(Carried, task.Method) {
			t.Fatalf("method %q of %s", task.Method, raw)
		}
		if task.ValidateFor(provider.KnownMethods) != nil {
			return // the front refuses it next, as in.php would
		}
		obj, err := TaskObject(task)
		if err != nil {
			t.Fatalf("TaskObject of a valid task %+v: %v", task, err)
		}
		b, _ := json.Marshal(obj)
		back, fl := ParseTask(b)
		if fl != nil || back.Method != task.Method || len(back.Params) != len(task.Params) {
			t.Fatalf("%s read back as %+v, %v; sent %+v", b, back, fl, task)
		}
	})
}
