// Package scripts_test tests the scripts that run the test servers.
package scripts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestServersDoNotInheritFiles starts a Mosquitto of its own (own state
// dir and port, beside the shared one) while holding a lock on a file it
// passes to servers.sh, as a caller running it under flock(1) does: the
// broker must not keep that file open, so the lock is free once the
// caller lets go of it, however long the broker runs.
func TestServersDoNotInheritFiles(t *testing.T) {
	if _, err := exec.LookPath("mosquitto"); err != nil {
		if _, err := os.Stat("/usr/sbin/mosquitto"); err != nil {
			testenv.Missing(t, "mosquitto is not installed; install it with: bash scripts/servers.sh install mosquitto")
		}
	}
	dir := t.TempDir()
	port := strings.TrimPrefix(testenv.FreeAddr(t), "127.0.0.1:")
	env := append(os.Environ(), "SLUICE_SERVERS_DIR="+dir, "SLUICE_MQTT_PORT="+port)
	servers := func(args ...string) {
		t.Helper()
		cmd := exec.Command("bash", append([]string{"servers.sh"}, args...)...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("servers.sh %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	lockPath := filepath.Join(dir, "caller.lock")
	lock, err := os.Create(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "servers.sh", "up", "mosquitto")
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{lock} // fd 3 of servers.sh, as flock(1) leaves it
	out, err := cmd.CombinedOutput()
	t.Cleanup(func() { servers("clean", "mosquitto") })
	if err != nil {
		t.Fatalf("servers.sh up mosquitto: %v\n%s", err, out)
	}
	_ = lock.Close()

	b, err := os.ReadFile(filepath.Join(dir, "mosquitto", "mosquitto.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		n, _ := strconv.Atoi(fd.Name())
		target, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", fd.Name()))
		if target == lockPath || strings.HasSuffix(target, ".lock") {
			t.Errorf("mosquitto (pid %d) holds the caller's file %s as fd %d", pid, target, n)
		}
	}
	again, err := os.Open(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := syscall.Flock(int(again.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("the caller's lock is still held after the caller let go of it: %v", err)
	}
}
