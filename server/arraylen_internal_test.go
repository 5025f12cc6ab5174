package server

import "testing"

func TestArrayLen(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want int
	}{
		{`[]`, 0},
		{"[ \n\t]", 0},
		{`[0]`, 1},
		{`[{}]`, 1},
		{`[0,1, 2 ]`, 3},
		{`[{"a":[1,2],"b":{"c":3}},[4,5]]`, 2},
		{`["a,b", "[", "]", "{", "\",", "\\", ","]`, 7},
		{`[[],{},""]`, 3},
	} {
		if got := arrayLen([]byte(c.in)); got != c.want {
			t.Errorf("arrayLen(%s) = %d, want %d", c.in, got, c.want)
		}
	}
}
