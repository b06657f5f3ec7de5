package supervise

import (
	"encoding/json"
	"fmt"
	"os"
	"syscall"
)

// redactTo starts a redactor that appends to log what is written to the
// returned pipe, secrets replaced. Without secrets it is log itself.
func (r *reaper) redactTo(name string, log *os.File, secrets []Secret) (*os.File, error) {
	if len(secrets) == 0 {
		return log, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	out, in, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer out.Close()
	sr, sw, err := os.Pipe()
	if err != nil {
		in.Close()
		return nil, err
	}
	defer sr.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		in.Close()
		sw.Close()
		return nil, err
	}
	defer devnull.Close()
	// A group of its own: stopping the process's group leaves it to read
	// the last of the output.
	attr := &syscall.ProcAttr{Dir: "/", Env: []string{"GOMAXPROCS=1"}, Files: []uintptr{out.Fd(), log.Fd(), devnull.Fd(), sr.Fd()},
		Sys: &syscall.SysProcAttr{Setpgid: true}}
	// The name is for ps only: "cortex-sync __shim --redact web".
	_, _, err = r.forkExec(exe, []string{os.Args[0], ShimArg, redactArg, name}, attr)
	if err != nil {
		in.Close()
		sw.Close()
		return nil, fmt.Errorf("start the redactor: %w", err)
	}
	wire := make([]wireSecret, 0, len(secrets))
	for _, s := range secrets {
		wire = append(wire, wireSecret{Name: s.Name, Value: []byte(s.Value)})
	}
	err = json.NewEncoder(sw).Encode(wire)
	if cerr := sw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		in.Close()
		return nil, fmt.Errorf("start the redactor: %w", err)
	}
	return in, nil
}
