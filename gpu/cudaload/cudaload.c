/*
 * cudaload: a CUDA program with a known workload, for scripts/gpu-check.sh
 * on a GPU machine that has the NVIDIA driver but no CUDA toolkit and no
 * PyTorch. It needs nothing but libcuda.so.1, opened at run time (so the
 * eBPF probes see the driver library loaded late, as in a real server), and
 * the PTX in spin.ptx, which the driver compiles for the GPU it finds.
 *
 * Each iteration allocates a device buffer (cuMemAlloc_v2), copies it in
 * (cuMemcpyHtoD_v2), launches the spin kernel K times (cuLaunchKernel),
 * waits for them (cuCtxSynchronize), copies the result out
 * (cuMemcpyDtoH_v2) and frees the buffer (cuMemFree_v2). At the end it
 * prints the exact counts, which the probes' counts can be held against.
 *
 *   cudaload [-ptx FILE] [-listen PORT] [-ready FILE] [-delay-ms MS]
 *            [-iterations N] [-secs S] [-kernels K] [-spin N] [-blocks B]
 *            [-pause-ms MS]
 *
 *   -listen PORT      listen on 127.0.0.1:PORT (never accepts): how the
 *                     sidecar finds an upstream by its port
 *   -ready FILE       write the PID there once the module is loaded
 *   -delay-ms MS      wait that long after ready before the first iteration
 *   -iterations N     stop after N iterations (0: until -secs is up)
 *   -secs S           run until S seconds after start, idle once done
 *   -pause-ms MS      sleep between iterations (a bursty neighbour)
 *
 * CUDALOAD_LIBCUDA names the driver library (default libcuda.so.1); the
 * tests point it at a stand-in.
 *
 * Build: gcc -O2 -o cudaload cudaload.c -ldl
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef unsigned long long CUdeviceptr;

/* CUjit_option values from cuda.h. */
enum { JIT_ERROR_LOG_BUFFER = 5, JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6 };

static struct {
	CUresult (*init)(unsigned);
	CUresult (*device_get)(CUdevice *, int);
	CUresult (*primary_retain)(CUcontext *, CUdevice);
	CUresult (*ctx_set_current)(CUcontext);
	CUresult (*module_load)(CUmodule *, const void *, unsigned, int *, void **);
	CUresult (*module_function)(CUfunction *, CUmodule, const char *);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	CUresult (*mem_free)(CUdeviceptr);
	CUresult (*htod)(CUdeviceptr, const void *, size_t);
	CUresult (*dtoh)(void *, CUdeviceptr, size_t);
	CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			   unsigned, void *, void **, void **);
	CUresult (*ctx_sync)(void);
	CUresult (*error_string)(CUresult, const char **); /* optional */
} cu;

static void *sym(void *h, const char *name, int required)
{
	void *p = dlsym(h, name);

	if (!p && required) {
		fprintf(stderr, "cudaload: %s: %s\n", name, dlerror());
		exit(2);
	}
	return p;
}

static void check(CUresult r, const char *what)
{
	const char *s = NULL;

	if (r == 0)
		return;
	if (cu.error_string)
		cu.error_string(r, &s);
	fprintf(stderr, "cudaload: %s: CUDA error %d (%s)\n", what, r, s ? s : "no description");
	exit(1);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0)
		;
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *b;
	long n;

	if (!f || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
		perror(path);
		exit(2);
	}
	b = calloc(1, n + 1);
	if (!b || fread(b, 1, n, f) != (size_t)n) {
		perror(path);
		exit(2);
	}
	fclose(f);
	return b;
}

static void listen_on(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	int one = 1, s = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
	    bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 16) != 0) {
		perror("cudaload: listen");
		exit(2);
	}
}

int main(int argc, char **argv)
{
	const char *ptx_path = "gpu/cudaload/spin.ptx", *ready = NULL, *lib = getenv("CUDALOAD_LIBCUDA");
	long delay_ms = 0, iterations = 0, pause_ms = 0, kernels = 20, blocks = 1024;
	unsigned spin = 1 << 14;
	double secs = 10;
	int port = 0;

	for (int i = 1; i < argc; i++) {
		const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v) {
			fprintf(stderr, "cudaload: %s needs a value\n", f);
			return 2;
		}
		i++;
		if (!strcmp(f, "-ptx"))
			ptx_path = v;
		else if (!strcmp(f, "-listen"))
			port = atoi(v);
		else if (!strcmp(f, "-ready"))
			ready = v;
		else if (!strcmp(f, "-delay-ms"))
			delay_ms = atol(v);
		else if (!strcmp(f, "-iterations"))
			iterations = atol(v);
		else if (!strcmp(f, "-secs"))
			secs = atof(v);
		else if (!strcmp(f, "-kernels"))
			kernels = atol(v);
		else if (!strcmp(f, "-spin"))
			spin = (unsigned)atol(v);
		else if (!strcmp(f, "-blocks"))
			blocks = atol(v);
		else if (!strcmp(f, "-pause-ms"))
			pause_ms = atol(v);
		else {
			fprintf(stderr, "cudaload: unknown flag %s\n", f);
			return 2;
		}
	}
	if (kernels < 1 || blocks < 1 || blocks > 65535) {
		fprintf(stderr, "cudaload: -kernels must be at least 1 and -blocks within 1..65535\n");
		return 2;
	}

	double start = now();
	char *ptx = read_file(ptx_path);
	if (port)
		listen_on(port);

	void *h = dlopen(lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "cudaload: %s\n", dlerror());
		return 2;
	}
	cu.init = sym(h, "cuInit", 1);
	cu.device_get = sym(h, "cuDeviceGet", 1);
	cu.primary_retain = sym(h, "cuDevicePrimaryCtxRetain", 1);
	cu.ctx_set_current = sym(h, "cuCtxSetCurrent", 1);
	cu.module_load = sym(h, "cuModuleLoadDataEx", 1);
	cu.module_function = sym(h, "cuModuleGetFunction", 1);
	cu.mem_alloc = sym(h, "cuMemAlloc_v2", 1);
	cu.mem_free = sym(h, "cuMemFree_v2", 1);
	cu.htod = sym(h, "cuMemcpyHtoD_v2", 1);
	cu.dtoh = sym(h, "cuMemcpyDtoH_v2", 1);
	cu.launch = sym(h, "cuLaunchKernel", 1);
	cu.ctx_sync = sym(h, "cuCtxSynchronize", 1);
	cu.error_string = sym(h, "cuGetErrorString", 0);

	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction fn;
	char log[8192] = "";
	int opts[] = { JIT_ERROR_LOG_BUFFER, JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
	void *vals[] = { log, (void *)(uintptr_t)sizeof log };

	check(cu.init(0), "cuInit");
	check(cu.device_get(&dev, 0), "cuDeviceGet");
	check(cu.primary_retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	check(cu.ctx_set_current(ctx), "cuCtxSetCurrent");
	CUresult r = cu.module_load(&mod, ptx, 2, opts, vals);
	if (r != 0)
		fprintf(stderr, "cudaload: JIT log: %s\n", log);
	check(r, "cuModuleLoadDataEx(spin.ptx)");
	check(cu.module_function(&fn, mod, "spin"), "cuModuleGetFunction(spin)");

	size_t bytes = (size_t)blocks * 256 * sizeof(float);
	float *host = calloc(1, bytes);
	if (!host) {
		perror("cudaload");
		return 2;
	}
	if (ready) {
		FILE *f = fopen(ready, "w");

		if (!f || fprintf(f, "%d", getpid()) < 0 || fclose(f) != 0) {
			perror(ready);
			return 2;
		}
	}
	printf("cudaload: pid %d ready: %ld kernels of %ld blocks x 256 threads x %u FMAs per iteration, %zu bytes each way\n",
	       getpid(), kernels, blocks, spin, bytes);
	fflush(stdout);
	if (delay_ms > 0)
		sleep_ms(delay_ms);

	unsigned long long n = 0, launches = 0, h2d = 0, d2h = 0, syncs = 0, allocs = 0, frees = 0;
	double busy0 = now();
	while ((iterations == 0 || (long)n < iterations) && now() - start < secs) {
		CUdeviceptr d;
		void *params[] = { &d, &spin };

		check(cu.mem_alloc(&d, bytes), "cuMemAlloc_v2");
		allocs++;
		check(cu.htod(d, host, bytes), "cuMemcpyHtoD_v2");
		h2d += bytes;
		for (long k = 0; k < kernels; k++) {
			check(cu.launch(fn, blocks, 1, 1, 256, 1, 1, 0, NULL, params, NULL), "cuLaunchKernel");
			launches++;
		}
		check(cu.ctx_sync(), "cuCtxSynchronize");
		syncs++;
		check(cu.dtoh(host, d, bytes), "cuMemcpyDtoH_v2");
		d2h += bytes;
		check(cu.mem_free(d), "cuMemFree_v2");
		frees++;
		n++;
		if (pause_ms > 0)
			sleep_ms(pause_ms);
	}
	double busy = now() - busy0;
	printf("cudaload: done: iterations %llu launches %llu h2d_bytes %llu d2h_bytes %llu syncs %llu allocs %llu frees %llu in %.3fs (%.0f launches/s)\n",
	       n, launches, h2d, d2h, syncs, allocs, frees, busy, busy > 0 ? launches / busy : 0);
	fflush(stdout);
	/* Stay alive (and on the GPU) until -secs is up, so the probes read the
	 * last counts before the process goes. */
	while (now() - start < secs)
		sleep_ms(50);
	return 0;
}
