package operator

import (
	"net"
	"strings"
	"testing"
)

func TestCheckListenNamesTheFlagOfAPortInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	err = CheckListen("metrics-bind-address", taken.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "--metrics-bind-address="+taken.Addr().String()) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("CheckListen = %v, want the flag, the address and why", err)
	}
	if err := CheckListen("metrics-bind-address", "0"); err != nil {
		t.Fatalf("a disabled listener is refused: %v", err)
	}
}
