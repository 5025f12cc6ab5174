package apiform_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/internal/apiform"
)

// manyFields is a hostile in.php body: about 8 MiB of tiny fields
// ({"key":"…","method":"userrecaptcha","00000":1,…}, 768,938 of them)
// with a key no one has.
func manyFields() []byte {
	var b bytes.Buffer
	b.WriteString(`{"key":"not-a-key-of-anyone","method":"userrecaptcha"`)
	for n := 0; n < 768936; n++ {
		fmt.Fprintf(&b, `,"%05x":1`, n)
	}
	b.WriteString("}")
	return b.Bytes()
}

// A JSON body of more fields than net/url takes in a query is refused
// before any field is decoded: with the exact error, no field of it kept,
// and a few hundred allocations for 8 MiB (decoding it into a map made
// one or more per field, 768,938 of them: millions). Not parallel: the
// allocations counted are the process's.
func TestJSONFieldsCappedBeforeDecoding(t *testing.T) {
	body := manyFields()
	if len(body) > 8<<20 {
		t.Fatalf("the body is %d bytes, over serve's default cap", len(body))
	}
	var q *apiform.Request
	var err error
	allocs := testing.AllocsPerRun(1, func() {
		r := httptest.NewRequest("POST", "/in.php?json=1", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		q, err = apiform.Parse(httptest.NewRecorder(), r, apiform.Options{MaxBody: 8 << 20})
	})
	want := "apiform: too many fields: the body holds more than 10000 fields (values of objects and arrays); send only the request's fields"
	if !errors.Is(err, apiform.ErrTooManyFields) || err.Error() != want {
		t.Fatalf("err %v, want %q", err, want)
	}
	if got := q.Fields(); len(got) != 1 || got["json"] != "1" {
		t.Errorf("fields %v, want the query's alone", got)
	}
	if allocs > 1000 {
		t.Errorf("%v allocations to refuse it, want under 1000", allocs)
	}
}

// The cap counts values at every depth, objects' and arrays', and takes
// exactly MaxFields.
func TestJSONFieldCapCountsEveryValue(t *testing.T) {
	t.Parallel()
	members := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf(`"f%d":%d`, i, i)
		}
		return strings.Join(parts, ",")
	}
	elements := strings.TrimSuffix(strings.Repeat(`"x",`, 8), ",")
	tests := []struct {
		name, body string
		want       error
	}{
		{"at the cap", "{" + members(10) + "}", nil},
		{"one over", "{" + members(11) + "}", apiform.ErrTooManyFields},
		{"nested, at the cap", `{"task":{` + members(9) + "}}", nil},
		{"nested, one over", `{"task":{` + members(10) + "}}", apiform.ErrTooManyFields},
		{"array elements, at the cap", `{"key":"k","images":[` + elements + "]}", nil},
		{"array elements, one over", `{"key":"k","images":[` + elements + `,{}]}`, apiform.ErrTooManyFields},
		{"names and strings with commas and braces", `{"a,b":"{,[,]}","c":"\",\\"}`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("POST", "/in.php", strings.NewReader(tc.body))
			r.Header.Set("Content-Type", "application/json")
			_, err := apiform.Parse(httptest.NewRecorder(), r, apiform.Options{MaxFields: 10})
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("err %v, want %v", err, tc.want)
			}
		})
	}
}

// A string longer than MaxString is refused before any is decoded, named
// by its path; an escape counts as the one byte it decodes to.
func TestJSONStringCappedBeforeDecoding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, want string
	}{
		{"createTask image", `{"clientKey":"k","task":{"type":"ImageToTextTask","body":"` + strings.Repeat("A", 65) + `"}}`,
			`apiform: field too long: field "task.body" is 65 bytes, over the 64 a field may be`},
		{"in.php body", `{"key":"k","method":"base64","body":"` + strings.Repeat("A", 65) + `"}`,
			`apiform: field too long: field "body" is 65 bytes, over the 64 a field may be`},
		{"a name", `{"` + strings.Repeat("n", 65) + `":1}`,
			`apiform: field too long: field "` + strings.Repeat("n", 40) + ` (its name)" is 65 bytes, over the 64 a field may be`},
		{"in an array", `{"images":["A","` + strings.Repeat("A", 65) + `"]}`,
			`apiform: field too long: field "images[]" is 65 bytes, over the 64 a field may be`},
		{"escapes count one each", `{"body":"` + strings.Repeat(`\/`, 64) + `"}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("POST", "/", strings.NewReader(tc.body))
			r.Header.Set("Content-Type", "application/json")
			q, err := apiform.Parse(httptest.NewRecorder(), r, apiform.Options{MaxString: 64})
			if tc.want == "" {
				if err != nil || q.Get("body") != strings.Repeat("/", 64) {
					t.Errorf("err %v, body %q", err, q.Get("body"))
				}
				return
			}
			if !errors.Is(err, apiform.ErrFieldTooLong) || err.Error() != tc.want {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}
