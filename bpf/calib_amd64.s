#include "textflag.h"

// calibNop is the probed no-op of the calibration. Assembly, so that no
// stack growth or asynchronous preemption can happen while a uretprobe
// has replaced its return address. It starts with an instruction the
// kernel must single-step out of line, as a compiled function's first
// instruction usually is: a probed RET or JMP would be emulated, and
// cheaper than what the probes meet in a CUDA library.
TEXT ·calibNop(SB), NOSPLIT|NOFRAME, $0-0
	MOVQ $1, AX
	RET

// func calibNopAddr() uintptr
TEXT ·calibNopAddr(SB), NOSPLIT, $0-8
	LEAQ ·calibNop(SB), AX
	MOVQ AX, ret+0(FP)
	RET

// func calibLoop(n int)
TEXT ·calibLoop(SB), NOSPLIT, $0-8
	MOVQ n+0(FP), BX
loop:
	TESTQ BX, BX
	JLE done
	CALL ·calibNop(SB)
	DECQ BX
	JMP loop
done:
	RET
