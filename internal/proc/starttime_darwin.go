package proc

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// StartTime returns the token naming the incarnation of pid: its start time
// from sysctl kern.proc.pid, as "<seconds>.<microseconds>" since the epoch.
func StartTime(pid int) (string, error) {
	if err := checkPID(pid); err != nil {
		return "", err
	}
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil || kp.Proc.P_pid != int32(pid) {
		if alive, aerr := Alive(pid); aerr == nil && !alive {
			return "", fmt.Errorf("%w: pid %d", ErrNoProcess, pid)
		}
		if err == nil {
			err = fmt.Errorf("sysctl returned pid %d", kp.Proc.P_pid)
		}
		return "", fmt.Errorf("proc: start time of pid %d: %w", pid, err)
	}
	tv := kp.Proc.P_starttime
	return fmt.Sprintf("%d.%06d", tv.Sec, tv.Usec), nil
}

func zombie(pid int) bool {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil || kp.Proc.P_pid != int32(pid) {
		return false
	}
	const sZomb = 5 // SZOMB in <sys/proc.h>
	return kp.Proc.P_stat == sZomb
}
