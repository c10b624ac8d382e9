package bytesize

import "testing"

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"0", 0, false},
		{"1048576", MiB, false},
		{"512B", 512, false},
		{"1KiB", KiB, false},
		{"10MiB", 10 * MiB, false},
		{"2GiB", 2 * GiB, false},
		{"1TiB", TiB, false},
		{"10 mib", 10 * MiB, false},
		{" 3KiB ", 3 * KiB, false},
		{"10MB", 0, true},
		{"1.5MiB", 0, true},
		{"-1", 0, true},
		{"MiB", 0, true},
		{"", 0, true},
		{"9999999999TiB", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parse(%q) error = %v, want error %t", tt.in, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("Parse(%q) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

func TestFormatReadsBack(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0"},
		{1000, "1000B"},
		{KiB, "1KiB"},
		{1536 * KiB, "1536KiB"},
		{10 * MiB, "10MiB"},
		{256 * MiB, "256MiB"},
		{2 * GiB, "2GiB"},
		{3 * TiB, "3TiB"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := Format(tt.in); got != tt.want {
				t.Errorf("Format(%d) = %q, want %q", tt.in, got, tt.want)
			}
			if back, err := Parse(Format(tt.in)); err != nil || back != tt.in {
				t.Errorf("round trip of %d = %d, %v", tt.in, back, err)
			}
		})
	}
}
