package execution

import "testing"

// The budget admits calls up to MaxN of them, and up to MaxBytes held
// between them, both bounds included; the call one past either is refused.
func TestDetachBudgetAdmitsUpToItsBoundsIncluded(t *testing.T) {
	t.Run("count", func(t *testing.T) {
		b := DetachBudget{MaxN: 2, MaxBytes: 1 << 20}
		if !b.Take(10) {
			t.Fatal("the first of 2 calls was refused")
		}
		if !b.Take(10) {
			t.Fatal("the second of 2 calls, the last MaxN admits, was refused")
		}
		if b.Take(10) {
			t.Fatal("a third call was admitted past MaxN 2")
		}
	})
	t.Run("bytes", func(t *testing.T) {
		b := DetachBudget{MaxN: 10, MaxBytes: 100}
		if !b.Take(60) {
			t.Fatal("a call of 60 bytes was refused in a budget of 100")
		}
		if !b.Take(40) {
			t.Fatal("a call of 40 bytes, bringing the budget to exactly 100, was refused")
		}
		if b.Take(1) {
			t.Fatal("a call of 1 byte was admitted past MaxBytes 100")
		}
	})
}

// Give returns the room Take reserved: a full budget admits again, as much
// as was given back and no more.
func TestDetachBudgetGiveReturnsTheRoom(t *testing.T) {
	b := DetachBudget{MaxN: 2, MaxBytes: 100}
	if !b.Take(30) || !b.Take(70) {
		t.Fatal("two calls within the budget were refused")
	}
	if b.Take(0) {
		t.Fatal("a third call was admitted past MaxN 2")
	}
	b.Give(70)
	if b.Take(71) {
		t.Fatal("a call of 71 bytes was admitted when 70 were given back")
	}
	if !b.Take(70) {
		t.Fatal("a call of the 70 bytes given back was refused")
	}
	b.Give(70)
	b.Give(30)
	if !b.Take(50) || !b.Take(50) {
		t.Fatal("two calls of 50 bytes were refused once the budget was given back whole")
	}
}
