package enum

import "testing"

func TestParseNamesAndRefuses(t *testing.T) {
	w := Words{"reject", "evict_oldest"}
	if i, err := w.Parse("evict_oldest"); i != 1 || err != nil {
		t.Errorf("Parse(evict_oldest) = %d, %v", i, err)
	}
	if got := w.Name(1); got != "evict_oldest" {
		t.Errorf("Name(1) = %q", got)
	}
	if got := w.Name(7); got != "invalid(7)" {
		t.Errorf("Name(7) = %q", got)
	}
	if err := w.Check(1); err != nil {
		t.Errorf("Check(1) = %v", err)
	}
	for given, want := range map[string]string{
		"evict-oldest": `must be one of reject, evict_oldest; got "evict-oldest" (did you mean evict_oldest?)`,
		"evict":        `must be one of reject, evict_oldest; got "evict" (did you mean evict_oldest?)`,
		"queue":        `must be one of reject, evict_oldest; got "queue"`,
		"":             `must be one of reject, evict_oldest; got ""`,
		"REJECTED":     `must be one of reject, evict_oldest; got "REJECTED" (did you mean reject?)`,
	} {
		if _, err := w.Parse(given); err == nil || err.Error() != want {
			t.Errorf("Parse(%q) = %v, want %q", given, err, want)
		}
	}
	if err := w.Check(2); err == nil || err.Error() != `must be one of reject, evict_oldest; got "invalid(2)"` {
		t.Errorf("Check(2) = %v", err)
	}
}

// A word reads the same in any case: operators write the environment in
// upper case, and "INFO" was always a log level.
func TestParseIgnoresCase(t *testing.T) {
	w := Words{"reject", "evict_oldest"}
	for given, want := range map[string]int{"reject": 0, "REJECT": 0, "Reject": 0, "EVICT_OLDEST": 1, "Evict_Oldest": 1} {
		if i, err := w.Parse(given); i != want || err != nil {
			t.Errorf("Parse(%q) = %d, %v; want %d", given, i, err, want)
		}
	}
}

func TestClosest(t *testing.T) {
	levels := []string{"debug", "info", "warn", "error"}
	for s, want := range map[string]string{"warning": "warn", "infp": "info", "verbose": "", "": ""} {
		if got := Closest(s, levels); got != want {
			t.Errorf("Closest(%q) = %q, want %q", s, got, want)
		}
	}
}

// Any case means the case of ASCII letters: a word spelled with the
// Kelvin sign or the long s, which Unicode folds to k and s, is refused.
func TestParseRefusesUnicodeLookalikes(t *testing.T) {
	w := Words{"keep", "fail_closed"}
	for _, given := range []string{"\u212aeep", "fail_clo\u017fed", "FAIL_CLO\u017fED"} {
		if i, err := w.Parse(given); err == nil {
			t.Errorf("Parse(%q) = %d, want it refused", given, i)
		}
	}
}
