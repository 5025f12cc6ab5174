package captchaq_test

import (
	"slices"
	"testing"

	"github.com/captchaq/captchaq"
)

func TestLongestFirst(t *testing.T) {
	img := func(id string) captchaq.Task {
		return captchaq.Task{ID: id, Method: "base64", Params: map[string]string{"body": "aGVsbG8="}}
	}
	ts := func(id string) captchaq.Task {
		return captchaq.Task{ID: id, Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/"}}
	}
	rc := func(id string) captchaq.Task {
		return captchaq.Task{ID: id, Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://shop.example/"}}
	}
	bad := captchaq.Task{ID: "bad", Method: "hcaptcha"}
	tasks := []captchaq.Task{img("i1"), ts("t1"), bad, rc("r1"), img("i2"), rc("r2"), ts("t2")}
	captchaq.LongestFirst(tasks)
	var got []string
	for _, t := range tasks {
		got = append(got, t.ID)
	}
	want := []string{"r1", "r2", "t1", "t2", "i1", "i2", "bad"}
	if !slices.Equal(got, want) {
		t.Fatalf("order = %v, want %v", got, want)
	}
	// Priority comes first, as the queue serves it: an urgent image before
	// a reCAPTCHA of the default priority.
	urgent := img("i0")
	urgent.Priority = 1
	tasks = []captchaq.Task{rc("r1"), urgent, ts("t1")}
	captchaq.LongestFirst(tasks)
	if got := []string{tasks[0].ID, tasks[1].ID, tasks[2].ID}; !slices.Equal(got, []string{"i0", "r1", "t1"}) {
		t.Fatalf("order = %v, want the urgent image first", got)
	}
}
