/*
 * The kernel cudaload launches: a fused multiply-add loop per thread, long
 * enough that the GPU shows busy. spin.ptx is generated from it by clang
 * (no CUDA toolkit needed) and committed:
 *
 *   clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_52 -nocudainc \
 *         -nocudalib -O2 -S -o spin.ptx spin.cu
 *
 * sm_52 PTX is compiled by the driver for whatever GPU it finds.
 */
#include <__clang_cuda_builtin_vars.h>
extern "C" __attribute__((global)) void spin(float *out, unsigned iters)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	float x = (float)i;
	for (unsigned n = 0; n < iters; n++)
		x = __builtin_fmaf(x, 0.9999f, 1.0f);
	out[i] = x;
}
