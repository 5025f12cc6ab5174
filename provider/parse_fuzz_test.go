package provider

import (
	"encoding/json"
	"strings"
	"testing"
)

var answerSeeds = []string{
	`{"status":1,"request":"7319581"}`,
	`{"status":1,"request":7319581}`,
	`{"status":"1","request":"x"}`,
	`{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE","error_text":"busy"}`,
	`{"status":0,"request":"CAPCHA_NOT_READY"}`,
	`{"status":1,"request":{"geetest_challenge":"c","geetest_validate":"v","geetest_seccode":"s"}}`,
	`{"status":1,"request":"{\"cookies\":{\"cf_clearance\":\"a\"}}","user_agent":"UA"}`,
	`{"status":1,"request":[1,2,3]}`,
	"OK|123", "OK|", "ERROR_WRONG_USER_KEY", "ERROR: 1001", "IP_BANNED", "CAPCHA_NOT_READY",
	"<html>502</html>", "", "{", `{"status":2}`, `{"status":1,"request":null}`,
	"T1|CAPCHA_NOT_READY|ERROR_CAPTCHA_UNSOLVABLE", "OK|a|b", "a||b",
	`{"geetest_seccode":"v|jordan"}|CAPCHA_NOT_READY`, `[1,|{"a":"|"}|x`,
}

func FuzzParseSubmitAnswer(f *testing.F) {
	for _, s := range answerSeeds {
		f.Add(200, []byte(s))
		f.Add(502, []byte(s))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		id, err := parseSubmitAnswer(status, body)
		if (id == "") == (err == nil) {
			t.Fatalf("id %q and err %v: exactly one must be set", id, err)
		}
		if err != nil {
			if err.Op != "submit" || err.Error() == "" {
				t.Fatalf("bad error %+v", err)
			}
			if status >= 500 && (err.Code != CodeHTTP5xx || err.Class != ClassTransient) {
				t.Fatalf("5xx gave %+v", err)
			}
			return
		}
		if !validID(id) || strings.ContainsAny(id, "|, \n") {
			t.Fatalf("unusable id %q", id)
		}
	})
}

func FuzzParsePollAnswer(f *testing.F) {
	for _, s := range answerSeeds {
		f.Add(200, []byte(s))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		o := parsePollAnswer(status, body)
		set := 0
		if o.ready {
			set++
		}
		if o.idErr != nil {
			set++
		}
		if o.reqErr != nil {
			set++
		}
		if set > 1 {
			t.Fatalf("more than one outcome: %+v", o)
		}
		if o.ready {
			if o.answer.Raw == "" || o.answer.Token == "" {
				t.Fatalf("ready without an answer: %+v", o.answer)
			}
			if o.answer.JSON != nil && !json.Valid(o.answer.JSON) {
				t.Fatalf("JSON set to invalid JSON %q", o.answer.JSON)
			}
		}
		if o.idErr != nil && !perID(o.idErr) {
			t.Fatalf("request-level class as a task error: %+v", o.idErr)
		}
		if o.reqErr != nil && perID(o.reqErr) {
			t.Fatalf("task-level class as a request error: %+v", o.reqErr)
		}
	})
}

func FuzzParseBulkAnswer(f *testing.F) {
	for _, s := range answerSeeds {
		for _, n := range []int{1, 2, 3} {
			f.Add(200, []byte(s), n)
		}
	}
	f.Fuzz(func(t *testing.T, status int, body []byte, n int) {
		if n < 1 || n > BulkMaxIDs {
			return
		}
		b := parseBulkAnswer(status, body, n)
		switch {
		case b.reqErr != nil:
			if b.unsupported || b.results != nil || perID(b.reqErr) {
				t.Fatalf("request error with more: %+v", b)
			}
		case b.unsupported:
			if b.results != nil || b.reason == "" {
				t.Fatalf("unsupported with results or no reason: %+v", b)
			}
		default:
			if len(b.results) != n {
				t.Fatalf("%d results for %d ids", len(b.results), n)
			}
			for _, r := range b.results {
				if r.reqErr != nil || (r.ready && r.answer.Raw == "") || (r.ready && r.idErr != nil) {
					t.Fatalf("bad result %+v", r)
				}
			}
		}
	})
}
