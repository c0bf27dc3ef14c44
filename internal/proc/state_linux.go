package proc

// ProcessState reports whether pid is stopped (state T or t in
// /proc/<pid>/stat) or running.
func ProcessState(pid int) State {
	if checkPID(pid) != nil {
		return StateUnknown
	}
	st, err := readStat(pid)
	if err != nil {
		return StateUnknown
	}
	switch st.State {
	case 'T', 't':
		return StateStopped
	default:
		return StateRunning
	}
}
