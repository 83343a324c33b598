//go:build linux

package clock

import (
	"os"
	"syscall"
	"time"
	"unsafe"
)

// sleepPrecisely sleeps d by reading a timerfd(2) through the runtime's poller: the goroutine
// waits as on a socket, its thread and P free for other goroutines, and the kernel's timer
// ends the poller's wait when it expires, whatever the poller's millisecond timeout. Where the
// timerfd cannot be had, it sleeps on a Go timer.
func sleepPrecisely(d time.Duration) {
	const clockMonotonic = 1
	fd, _, errno := syscall.Syscall(syscall.SYS_TIMERFD_CREATE, clockMonotonic, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno != 0 {
		time.Sleep(d)
		return
	}
	f := os.NewFile(fd, "timerfd") // non-blocking: a File the poller waits on
	defer f.Close()
	spec := struct{ interval, value syscall.Timespec }{value: syscall.NsecToTimespec(int64(d))}
	if _, _, errno := syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, fd, 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0); errno != 0 {
		time.Sleep(d)
		return
	}
	var expirations [8]byte
	if _, err := f.Read(expirations[:]); err != nil {
		time.Sleep(d) // never expected; still never short
	}
}
