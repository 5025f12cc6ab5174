package latency

import (
	"testing"
	"time"
)

func TestWindowQuantileAndBound(t *testing.T) {
	t.Parallel()
	w := NewWindow(4)
	if w.Quantile(0.5) != 0 {
		t.Fatal("empty quantile not 0")
	}
	for _, s := range []int{9, 1, 5, 3, 7, 2} { // keeps 5 3 7 2
		w.Add(time.Duration(s) * time.Second)
	}
	if w.Len() != 4 {
		t.Fatalf("Len %d", w.Len())
	}
	tests := []struct {
		q    float64
		want time.Duration
	}{{0, 2 * time.Second}, {0.5, 3 * time.Second}, {0.99, 5 * time.Second}, {1, 7 * time.Second}}
	for _, tt := range tests {
		if got := w.Quantile(tt.q); got != tt.want {
			t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
}

func TestEstimatorPriorThenLearned(t *testing.T) {
	t.Parallel()
	e := NewEstimator(0.2, 16, func(kind string) time.Duration {
		if kind == "turnstile" {
			return 10 * time.Second
		}
		return time.Second
	})
	if got := e.Estimate("turnstile"); got != 10*time.Second {
		t.Fatalf("prior %v", got)
	}
	// One fast sample replaces the prior at once: a simulator may be far
	// faster than the published times.
	e.Observe("turnstile", 200*time.Millisecond)
	if got := e.Estimate("turnstile"); got != 200*time.Millisecond {
		t.Fatalf("after one sample %v", got)
	}
	for i := 1; i <= 10; i++ {
		e.Observe("turnstile", time.Duration(i)*100*time.Millisecond)
	}
	// Samples 100..1000ms plus 200ms: 11 values, index int(0.2*10)=2 → 200ms.
	if got := e.Estimate("turnstile"); got != 200*time.Millisecond {
		t.Fatalf("learned %v", got)
	}
	if got := e.Estimate("image"); got != time.Second {
		t.Fatalf("other kind %v", got)
	}
}
