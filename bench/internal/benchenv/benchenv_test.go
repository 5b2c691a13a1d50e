package benchenv

import "testing"

func TestParseCPUSeconds(t *testing.T) {
	// A command name with a space and a parenthesis, as /proc allows.
	stat := "4242 (a (b) c) S 1 4242 4242 0 -1 4194304 1000 0 0 0 250 75 0 0 20 0 12 0 100 1000000 2000 18446744073709551615"
	got, err := parseCPUSeconds(stat)
	if err != nil {
		t.Fatal(err)
	}
	if got != 3.25 {
		t.Fatalf("got %v CPU seconds, want 3.25 (250 + 75 ticks)", got)
	}
	if _, err := parseCPUSeconds("4242 (x) S 1"); err == nil {
		t.Fatal("a short line parsed")
	}
}
