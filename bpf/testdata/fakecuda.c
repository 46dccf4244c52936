/*
 * A stand-in for the CUDA driver library (libcuda.so.1) with the real
 * entry points' names and argument layouts and a known behaviour: copies
 * do nothing, synchronisations sleep (the stream or event handle is the
 * number of milliseconds), allocations hand out made-up device pointers.
 * Each function touches its own counter so that no two compile to the same
 * code (identical functions could be folded into one address).
 */
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;

static volatile unsigned long calls[32];
static CUdeviceptr next_ptr = 0x700000000000ull;

#define CUDA_ERROR_INVALID_VALUE 1

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0)
		;
}

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
			unsigned bz, unsigned shmem, void *stream, void **params, void **extra)
{
	calls[0]++;
	return 0;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { calls[1]++; return 0; }
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { calls[2]++; return 0; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { calls[3]++; return 0; }
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { calls[4]++; return 0; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s) { calls[5]++; return 0; }
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *s) { calls[6]++; return 0; }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *s) { calls[7]++; return 0; }
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, void *s) { calls[8]++; return 0; }

CUresult cuCtxSynchronize(void) { calls[9]++; sleep_ms(3); return 0; }
CUresult cuStreamSynchronize(void *stream) { calls[10]++; sleep_ms((long)(uintptr_t)stream); return 0; }
CUresult cuEventSynchronize(void *event) { calls[11]++; sleep_ms((long)(uintptr_t)event); return 0; }

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	calls[12]++;
	if (n == 0)
		return CUDA_ERROR_INVALID_VALUE;
	*p = next_ptr;
	next_ptr += 0x100000 + n;
	return 0;
}

CUresult cuMemFree_v2(CUdeviceptr p) { calls[13]++; return 0; }

/* Set-up calls, for gpu/cudaload run against this stand-in: not probed. */
CUresult cuInit(unsigned flags) { calls[14]++; return 0; }
CUresult cuDeviceGet(int *dev, int ordinal) { calls[15]++; *dev = ordinal; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) { calls[16]++; *ctx = (void *)&calls[16]; return 0; }
CUresult cuCtxSetCurrent(void *ctx) { calls[17]++; return 0; }
CUresult cuModuleLoadDataEx(void **mod, const void *image, unsigned n, int *opts, void **vals)
{
	calls[18]++;
	*mod = (void *)&calls[18];
	return 0;
}
CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) { calls[19]++; *fn = (void *)&calls[19]; return 0; }
