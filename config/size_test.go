package config

import "testing"

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    Size
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
			got, err := ParseSize(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseSize(%q) error = %v, want error %t", tt.in, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("ParseSize(%q) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

func TestSizeString(t *testing.T) {
	tests := []struct {
		in   Size
		want string
	}{
		{0, "0"},
		{1000, "1000"},
		{KiB, "1KiB"},
		{1536 * KiB, "1536KiB"},
		{10 * MiB, "10MiB"},
		{256 * MiB, "256MiB"},
		{2 * GiB, "2GiB"},
		{3 * TiB, "3TiB"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.in.String(); got != tt.want {
				t.Errorf("Size(%d).String() = %q, want %q", int64(tt.in), got, tt.want)
			}
			var back Size
			if err := back.UnmarshalText([]byte(tt.in.String())); err != nil || back != tt.in {
				t.Errorf("round trip of %d = %d, %v", int64(tt.in), back, err)
			}
		})
	}
}

func TestSizeFromYAMLInteger(t *testing.T) {
	cfg := mustLoad(t, Source{File: writeFile(t, upstreamOnly+"defaults:\n  max_response_body: 2048\n")})
	if got, want := cfg.Defaults.MaxResponseBody, int64(2*KiB); got != want {
		t.Errorf("max_response_body = %d, want %d", got, want)
	}
}
