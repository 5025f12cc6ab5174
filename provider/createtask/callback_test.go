package createtask_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
)

// TestReadCallback: a callbackUrl POST as the services send it, read
// into the task's id and its answer or in.php code; field names in any
// letter case; what is not such a body is refused, saying why.
func TestReadCallback(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body string
		want createtask.Callback
	}{
		{`{"errorId":0,"status":"ready","solution":{"gRecaptchaResponse":"03AG-tok"},"cost":"0.00299","taskId":72345678901}`,
			createtask.Callback{TaskID: "72345678901", Ready: true, Answer: provider.Answer{Raw: "03AG-tok", Token: "03AG-tok"}}},
		{`{"ErrorID":0,"STATUS":"Ready","Solution":{"text":"deditur"},"TaskId":"37223a89-06ed-442c-a0b8-22067b79c5b4"}`,
			createtask.Callback{TaskID: "37223a89-06ed-442c-a0b8-22067b79c5b4", Ready: true, Answer: provider.Answer{Raw: "deditur", Token: "deditur"}}},
		{`{"errorId":0,"status":"ready","solution":{"token":"0.tok","userAgent":"UA"},"taskId":5}`,
			createtask.Callback{TaskID: "5", Ready: true, Answer: provider.Answer{Raw: `{"token":"0.tok","userAgent":"UA"}`, Token: "0.tok", JSON: json.RawMessage(`{"token":"0.tok","userAgent":"UA"}`)}}},
		{`{"errorId":12,"errorCode":"ERROR_CAPTCHA_UNSOLVABLE","errorDescription":"x","taskId":5}`, createtask.Callback{TaskID: "5", Code: "ERROR_CAPTCHA_UNSOLVABLE"}},
		{`{"errorId":16,"errorCode":"ERROR_NO_SUCH_CAPCHA_ID","taskId":5}`, createtask.Callback{TaskID: "5", Code: "ERROR_WRONG_CAPTCHA_ID"}},
		{`{"errorId":3,"taskId":5}`, createtask.Callback{TaskID: "5", Code: "ERROR_3"}},
		{`{"errorId":1,"errorCode":"CAPTCHA_NOT_READY","taskId":5}`, createtask.Callback{TaskID: "5", Code: "CAPCHA_NOT_READY"}},
		{`{"errorId":0,"status":"processing","taskId":5}`, createtask.Callback{TaskID: "5", Code: "CAPCHA_NOT_READY"}},
	} {
		got, err := createtask.ReadCallback([]byte(c.body))
		if err != nil {
			t.Errorf("%s: %v", c.body, err)
			continue
		}
		if d := cmp.Diff(c.want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", c.body, d)
		}
	}
	for body, want := range map[string]string{
		`[1]`:                                            "callback: the body must be getTaskResult's JSON object with the taskId, got [1]",
		`{"taskId":5,"TASKID":6}`:                        "callback: the body must be getTaskResult's JSON object with the taskId",
		`{"status":"ready"}`:                             "callback: taskId is missing",
		`{"taskId":"a b","status":"ready"}`:              "callback: taskId is missing or not a task id",
		`{"taskId":{},"status":"ready"}`:                 "callback: taskId is missing or not a task id",
		`{"taskId":5,"status":"ready","solution":"tok"}`: `callback: status ready with no solution captchaq can read: "tok"`,
		`{"taskId":5,"status":"failed"}`:                 `callback: status "failed" is neither ready nor processing`,
		`{"taskId":5,"pad":"` + strings.Repeat("x", createtask.CallbackLimit) + `"}`: "callback: the body is over 1048576 bytes",
	} {
		if _, err := createtask.ReadCallback([]byte(body)); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%.60s: %v, want %q", body, err, want)
		}
	}
}
