package broker

import "testing"

func TestPacketIDFromKey(t *testing.T) {
	tests := []struct {
		key    string
		want   uint16
		wantOK bool
	}{
		{"IFM_sluice-gw:1", 1, true},
		{"IFM_sluice-gw:65535", 65535, true},
		{"IFM_client:with:colons:42", 42, true},
		{"IFM_sluice-gw:0", 0, false},
		{"IFM_sluice-gw:65536", 0, false},
		{"IFM_sluice-gw:", 0, false},
		{"IFM_sluice-gw", 0, false},
		{"IFM_sluice-gw:x1", 0, false},
	}
	for _, tt := range tests {
		got, ok := packetIDFromKey(tt.key)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("packetIDFromKey(%q) = %d, %v; want %d, %v", tt.key, got, ok, tt.want, tt.wantOK)
		}
	}
}
