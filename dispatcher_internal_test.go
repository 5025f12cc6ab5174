package captchaq

import "testing"

func TestSubmitConcurrency(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ threads, want int }{
		{1, 1}, {5, 5}, {8, 8}, {20, 8}, {512, 8}, {640, 10}, {5000, 78},
	} {
		if got := submitConcurrency(c.threads); got != c.want {
			t.Errorf("submitConcurrency(%d) = %d, want %d", c.threads, got, c.want)
		}
	}
}
