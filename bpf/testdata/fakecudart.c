/*
 * A stand-in for the CUDA runtime (libcudart.so.12). Like the real one it
 * loads the driver library on first use and does its work through it, so
 * every runtime call here makes a nested driver call that the probes must
 * not count twice. The driver is called through pointers and never as a
 * tail call, as a runtime that checks the result would.
 */
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int cudaError_t;
typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef struct { unsigned x, y, z; } dim3;

enum { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };

static CUresult (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
static CUresult (*htod)(CUdeviceptr, const void *, size_t);
static CUresult (*dtoh)(void *, CUdeviceptr, size_t);
static CUresult (*dtod)(CUdeviceptr, CUdeviceptr, size_t);
static CUresult (*anycopy)(CUdeviceptr, CUdeviceptr, size_t);
static CUresult (*htod_async)(CUdeviceptr, const void *, size_t, void *);
static CUresult (*dtoh_async)(void *, CUdeviceptr, size_t, void *);
static CUresult (*dtod_async)(CUdeviceptr, CUdeviceptr, size_t, void *);
static CUresult (*anycopy_async)(CUdeviceptr, CUdeviceptr, size_t, void *);
static CUresult (*ctx_sync)(void);
static CUresult (*stream_sync)(void *);
static CUresult (*event_sync)(void *);
static CUresult (*mem_alloc)(CUdeviceptr *, size_t);
static CUresult (*mem_free)(CUdeviceptr);

static void *need(void *h, const char *name)
{
	void *p = dlsym(h, name);

	if (!p) {
		fprintf(stderr, "fakecudart: %s: %s\n", name, dlerror());
		abort();
	}
	return p;
}

__attribute__((constructor)) static void load_driver(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW);

	if (!h) {
		fprintf(stderr, "fakecudart: %s\n", dlerror());
		abort();
	}
	launch = need(h, "cuLaunchKernel");
	htod = need(h, "cuMemcpyHtoD_v2");
	dtoh = need(h, "cuMemcpyDtoH_v2");
	dtod = need(h, "cuMemcpyDtoD_v2");
	anycopy = need(h, "cuMemcpy");
	htod_async = need(h, "cuMemcpyHtoDAsync_v2");
	dtoh_async = need(h, "cuMemcpyDtoHAsync_v2");
	dtod_async = need(h, "cuMemcpyDtoDAsync_v2");
	anycopy_async = need(h, "cuMemcpyAsync");
	ctx_sync = need(h, "cuCtxSynchronize");
	stream_sync = need(h, "cuStreamSynchronize");
	event_sync = need(h, "cuEventSynchronize");
	mem_alloc = need(h, "cuMemAlloc_v2");
	mem_free = need(h, "cuMemFree_v2");
}

static cudaError_t err(CUresult r) { return r == 0 ? 0 : 1; }

cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, void *stream)
{
	return err(launch((void *)func, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shmem, stream, args, NULL));
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind)
{
	switch (kind) {
	case cudaMemcpyHostToDevice: return err(htod((CUdeviceptr)dst, src, n));
	case cudaMemcpyDeviceToHost: return err(dtoh(dst, (CUdeviceptr)src, n));
	case cudaMemcpyDeviceToDevice: return err(dtod((CUdeviceptr)dst, (CUdeviceptr)src, n));
	default: return err(anycopy((CUdeviceptr)dst, (CUdeviceptr)src, n));
	}
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream)
{
	switch (kind) {
	case cudaMemcpyHostToDevice: return err(htod_async((CUdeviceptr)dst, src, n, stream));
	case cudaMemcpyDeviceToHost: return err(dtoh_async(dst, (CUdeviceptr)src, n, stream));
	case cudaMemcpyDeviceToDevice: return err(dtod_async((CUdeviceptr)dst, (CUdeviceptr)src, n, stream));
	default: return err(anycopy_async((CUdeviceptr)dst, (CUdeviceptr)src, n, stream));
	}
}

cudaError_t cudaStreamSynchronize(void *stream) { return err(stream_sync(stream)); }
cudaError_t cudaDeviceSynchronize(void) { return err(ctx_sync()); }
cudaError_t cudaEventSynchronize(void *event) { return err(event_sync(event)); }

cudaError_t cudaMalloc(void **p, size_t n) { return err(mem_alloc((CUdeviceptr *)p, n)); }

cudaError_t cudaFree(void *p)
{
	if (!p)
		return 0;
	return err(mem_free((CUdeviceptr)p));
}
