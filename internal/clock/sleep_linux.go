//go:build linux

package clock

import (
	"os"
	"syscall"
	"time"
	"unsafe"
)

// sleepPrecisely sleeps d on a timerfd made for this sleep alone (see preciseTimer).
func sleepPrecisely(d time.Duration) {
	var t preciseTimer
	defer t.close()
	t.sleep(d)
}

// preciseTimer is a timerfd(2), made on first use, that sleep reads through the runtime's
// poller: the goroutine waits as on a socket, its thread and P free for other goroutines, and
// the kernel's timer ends the poller's wait when it expires, whatever the poller's millisecond
// timeout. Where the timerfd cannot be had, it sleeps on a Go timer.
type preciseTimer struct {
	f  *os.File // nil until made
	fd uintptr  // f's descriptor, kept here: File.Fd would make it blocking
}

// sleep sleeps d on the timer.
func (t *preciseTimer) sleep(d time.Duration) {
	if t.f == nil {
		const clockMonotonic = 1
		fd, _, errno := syscall.Syscall(syscall.SYS_TIMERFD_CREATE, clockMonotonic, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if errno != 0 {
			time.Sleep(d)
			return
		}
		t.f, t.fd = os.NewFile(fd, "timerfd"), fd // non-blocking: a File the poller waits on
	}
	spec := struct{ interval, value syscall.Timespec }{value: syscall.NsecToTimespec(int64(d))}
	if _, _, errno := syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, t.fd, 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0); errno != 0 {
		time.Sleep(d)
		return
	}
	var expirations [8]byte
	if _, err := t.f.Read(expirations[:]); err != nil {
		time.Sleep(d) // never expected; still never short
	}
}

// close frees the timerfd.
func (t *preciseTimer) close() {
	if t.f != nil {
		_ = t.f.Close()
		t.f = nil
	}
}
