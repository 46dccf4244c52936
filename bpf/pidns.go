package bpf

import (
	"fmt"
	"os"
)

// initPIDNS is the inode of the kernel's initial PID namespace
// (PROC_PID_INIT_INO): the programs see tasks by their PIDs there.
const initPIDNS = 0xEFFFFFFC

// kernelPIDs fails when this process numbers processes differently from
// the kernel: inside a PID namespace of its own (a container without
// hostPID, shareProcessNamespace included) the upstream's PIDs found
// through /proc are not the ones the probes see, and following them would
// follow whatever host processes carry those numbers.
func kernelPIDs() error {
	link, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return fmt.Errorf("cannot tell this process's PID namespace: %w", err)
	}
	if link != fmt.Sprintf("pid:[%d]", initPIDNS) {
		return fmt.Errorf("this process is in a PID namespace of its own (%s), whose PIDs are not the kernel's: run it in the host's (Kubernetes: hostPID: true, which the injector sets for inferwatch.io/ebpf pods)", link)
	}
	return nil
}
