package tasktable_test

import (
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/sched"
	"github.com/captchaq/captchaq/internal/tasktable"
)

type task struct{ id string }

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestLifecycle(t *testing.T) {
	tb := tasktable.New[*task](sched.Config{}, nil)
	a, b := &task{"a"}, &task{"b"}
	now := time.Unix(0, 0)
	tb.Do(func(tx tasktable.Tx[*task]) {
		tx.Add("a", a)
		tx.Add("b", b)
		tx.Waiting().Push(sched.Item[*task]{ID: "a", Value: a}, now)
		tx.Fly("b", "p:B1", b)
	})
	if got := tb.Counts(); got != (tasktable.Counts{Tasks: 2, Waiting: 1, InFlight: 1, Keys: 1}) {
		t.Fatalf("Counts = %+v, want 2 tasks, 1 waiting, 1 in flight", got)
	}
	if v, ok := tb.Get("a"); !ok || v != a {
		t.Fatalf("Get(a) = %v, %v", v, ok)
	}
	n, idle := tb.Idle()
	room, freed := tb.Room(3)
	if n != 2 || room != 1 {
		t.Fatalf("Idle = %d, Room(3) = %d; want 2 and 1", n, room)
	}
	tb.Do(func(tx tasktable.Tx[*task]) {
		if v, ok := tx.ByKey("p:B1"); !ok || v != b {
			t.Errorf("ByKey(p:B1) = %v, %v", v, ok)
		}
		if !tx.Land("b", "p:B1", b) {
			t.Error("Land(b) = false for a task in flight")
		}
		if tx.Land("b", "p:B1", b) {
			t.Error("Land(b) again = true")
		}
		if _, ok := tx.ByKey("p:B1"); ok {
			t.Error("p:B1 still indexed after Land")
		}
		tx.Remove("b")
	})
	if !closed(freed) {
		t.Error("Remove did not wake those waiting for room")
	}
	if closed(idle) {
		t.Error("idle woke with a task left")
	}
	tb.Do(func(tx tasktable.Tx[*task]) {
		tx.Waiting().Remove("a")
		tx.Remove("a")
	})
	if !closed(idle) {
		t.Error("idle did not wake when the table emptied")
	}
}

// A key another task took over since stays indexed when the first lands.
func TestLandKeepsAnotherTasksKey(t *testing.T) {
	tb := tasktable.New[*task](sched.Config{}, nil)
	a, b := &task{"a"}, &task{"b"}
	tb.Do(func(tx tasktable.Tx[*task]) {
		tx.Fly("a", "k", a)
		tx.Fly("b", "k", b)
		tx.Land("a", "k", a)
		if v, ok := tx.ByKey("k"); !ok || v != b {
			t.Errorf("ByKey(k) = %v, %v; want b", v, ok)
		}
		var n int
		tx.EachInFlight(func(*task) { n++ })
		if n != 1 {
			t.Errorf("%d in flight, want 1", n)
		}
	})
}

func TestClaims(t *testing.T) {
	tb := tasktable.New[*task](sched.Config{}, nil)
	var busy <-chan struct{}
	tb.Do(func(tx tasktable.Tx[*task]) {
		if _, ok := tx.Claim("a"); !ok {
			t.Fatal("first Claim(a) refused")
		}
		var ok bool
		if busy, ok = tx.Claim("a"); ok || busy == nil {
			t.Fatal("second Claim(a) granted")
		}
		if !tx.Claimed("a") {
			t.Error("Claimed(a) = false")
		}
	})
	var wg sync.WaitGroup
	wg.Go(func() { <-busy })
	tb.Do(func(tx tasktable.Tx[*task]) { tx.Release("a") })
	wg.Wait()
	tb.Do(func(tx tasktable.Tx[*task]) {
		if tx.Claimed("a") {
			t.Error("Claimed(a) after Release")
		}
	})
}

func TestWakeRoom(t *testing.T) {
	tb := tasktable.New[*task](sched.Config{}, nil)
	_, freed := tb.Room(1)
	tb.WakeRoom()
	if !closed(freed) {
		t.Error("WakeRoom did not close the room channel")
	}
}

// onBusy hears each change of whether tasks wait, once, at the end of
// the Do that made it.
func TestOnBusy(t *testing.T) {
	var heard []bool
	tb := tasktable.New[*task](sched.Config{}, func(b bool) { heard = append(heard, b) })
	a, b := &task{"a"}, &task{"b"}
	now := time.Unix(0, 0)
	tb.Do(func(tx tasktable.Tx[*task]) {
		tx.Waiting().Push(sched.Item[*task]{ID: "a", Value: a}, now)
		tx.Waiting().Push(sched.Item[*task]{ID: "b", Value: b}, now)
	})
	tb.Do(func(tx tasktable.Tx[*task]) { tx.Waiting().Remove("a") })
	tb.Do(func(tx tasktable.Tx[*task]) { tx.Waiting().Remove("b") })
	tb.Do(func(tx tasktable.Tx[*task]) {})
	if len(heard) != 2 || !heard[0] || heard[1] {
		t.Fatalf("onBusy heard %v, want [true false]", heard)
	}
}
