/*
 * The test program of package bpf: it loads the fake CUDA libraries late
 * (when told to), makes a known set of CUDA calls, and reports what it did.
 * Commands come one per line on stdin so the test can hold it between
 * steps.
 *
 *   cudaprog LIBDIR script [unlink]   load on "load", run the exact script on "go"
 *   cudaprog LIBDIR launches N        load at once, N cudaLaunchKernel on "go"
 *   cudaprog LIBDIR paced RATE SECS   load at once, RATE launches/s for SECS on "go"
 *   cudaprog - sched IDLE_MS BUSY_MS  4 threads mostly sleeping, then 4 spinning
 *   cudaprog - oom PROCS_FILE         join the cgroup, on "go" allocate until killed
 *   cudaprog LIBDIR leak MIB SECS     load at once, on "go" cudaMalloc MIB MiB every
 *                                     100 ms for SECS and never free it
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

typedef struct { unsigned x, y, z; } dim3;
typedef int (*launch_fn)(const void *, dim3, dim3, void **, size_t, void *);

static const char *libdir;
static void *rt, *drv;

static void die(const char *what)
{
	fprintf(stderr, "cudaprog: %s: %s\n", what, dlerror());
	exit(2);
}

static void *sym(void *h, const char *name)
{
	void *p = dlsym(h, name);

	if (!p)
		die(name);
	return p;
}

static void expect(const char *cmd)
{
	char line[64];

	if (!fgets(line, sizeof line, stdin)) {
		fprintf(stderr, "cudaprog: stdin closed while waiting for %s\n", cmd);
		exit(3);
	}
	line[strcspn(line, "\n")] = 0;
	if (strcmp(line, cmd) != 0) {
		fprintf(stderr, "cudaprog: got %s, want %s\n", line, cmd);
		exit(3);
	}
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void load(int unlink_after)
{
	char rtpath[4096], drvpath[4096];

	snprintf(rtpath, sizeof rtpath, "%s/libcudart.so.12", libdir);
	snprintf(drvpath, sizeof drvpath, "%s/libcuda.so.1", libdir);
	rt = dlopen(rtpath, RTLD_NOW);
	if (!rt)
		die(rtpath);
	drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (!drv)
		die("libcuda.so.1 (loaded by libcudart)");
	if (unlink_after) {
		unlink(rtpath);
		unlink(drvpath);
	}
}

/* Host functions whose addresses are "launched": the symbolizer should
 * name them. */
__attribute__((noinline)) void kernel_a(void) { __asm__ volatile(""); }
__attribute__((noinline)) void kernel_b(void) { __asm__ volatile(""); }

static void script(void)
{
	launch_fn launch = (launch_fn)sym(rt, "cudaLaunchKernel");
	int (*cu_launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **) = sym(drv, "cuLaunchKernel");
	int (*memcpy_)(void *, const void *, size_t, int) = sym(rt, "cudaMemcpy");
	int (*memcpy_async)(void *, const void *, size_t, int, void *) = sym(rt, "cudaMemcpyAsync");
	int (*htod)(uint64_t, const void *, size_t) = sym(drv, "cuMemcpyHtoD_v2");
	int (*dtoh)(void *, uint64_t, size_t) = sym(drv, "cuMemcpyDtoH_v2");
	int (*dtod_async)(uint64_t, uint64_t, size_t, void *) = sym(drv, "cuMemcpyDtoDAsync_v2");
	int (*stream_sync)(void *) = sym(rt, "cudaStreamSynchronize");
	int (*device_sync)(void) = sym(rt, "cudaDeviceSynchronize");
	int (*event_sync)(void *) = sym(rt, "cudaEventSynchronize");
	int (*cu_stream_sync)(void *) = sym(drv, "cuStreamSynchronize");
	int (*cu_ctx_sync)(void) = sym(drv, "cuCtxSynchronize");
	int (*malloc_)(void **, size_t) = sym(rt, "cudaMalloc");
	int (*free_)(void *) = sym(rt, "cudaFree");
	int (*cu_alloc)(uint64_t *, size_t) = sym(drv, "cuMemAlloc_v2");
	int (*cu_free)(uint64_t) = sym(drv, "cuMemFree_v2");
	dim3 g = { 1, 1, 1 }, b = { 32, 1, 1 };
	char buf[4096];
	long long t, sync_ns = 0;
	void *p[5], *fail;
	uint64_t d[2];
	int i;

	for (i = 0; i < 100; i++)
		launch((const void *)kernel_a, g, b, NULL, 0, NULL);
	for (i = 0; i < 10; i++)
		launch((const void *)kernel_b, g, b, NULL, 0, NULL);
	for (i = 0; i < 50; i++)
		cu_launch((void *)0x1234000, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);

	for (i = 0; i < 3; i++)
		memcpy_(buf, buf, 1000, 1);
	for (i = 0; i < 2; i++)
		memcpy_(buf, buf, 2048, 2);
	memcpy_async(buf, buf, 4096, 3, NULL);
	memcpy_(buf, buf, 512, 4);
	htod(0x7000, buf, 777);
	for (i = 0; i < 2; i++)
		dtoh(buf, 0x7000, 333);
	dtod_async(0x7000, 0x8000, 100, NULL);

#define TIMED(call) do { t = now_ns(); call; sync_ns += now_ns() - t; } while (0)
	for (i = 0; i < 2; i++)
		TIMED(stream_sync((void *)5));
	TIMED(device_sync());
	TIMED(event_sync((void *)7));
	TIMED(cu_stream_sync((void *)4));
	TIMED(cu_ctx_sync());

	for (i = 0; i < 5; i++)
		if (malloc_(&p[i], 1 << 20) != 0)
			exit(4);
	free_(p[0]);
	free_(p[1]);
	for (i = 0; i < 2; i++)
		if (cu_alloc(&d[i], 4096) != 0)
			exit(4);
	cu_free(d[0]);
	if (malloc_(&fail, 0) == 0)
		exit(4);
	free_(NULL);
	free_((void *)0xdead0000);

	say("done sync_ns=%lld", sync_ns);
}

static void paced(long rate, double secs)
{
	launch_fn launch = (launch_fn)sym(rt, "cudaLaunchKernel");
	dim3 g = { 1, 1, 1 }, b = { 32, 1, 1 };
	long long start = now_ns(), end = start + (long long)(secs * 1e9), t;
	long done = 0;
	struct rusage r0, r1;

	getrusage(RUSAGE_SELF, &r0);
	while ((t = now_ns()) < end) {
		long due = (long)((double)rate * (double)(t - start) / 1e9);
		long long next = start + ((t - start) / 1000000 + 1) * 1000000;
		struct timespec ts = { next / 1000000000LL, next % 1000000000LL };

		while (done < due) {
			launch((const void *)kernel_a, g, b, NULL, 0, NULL);
			done++;
		}
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	}
	getrusage(RUSAGE_SELF, &r1);
	long long cpu = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) * 1000000LL +
			(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec - r0.ru_stime.tv_usec);
	say("result calls=%ld cpu_us=%lld wall_us=%lld", done, cpu, (now_ns() - start) / 1000);
}

static long long deadline;
static void *sleeper(void *arg)
{
	struct timespec ts = { 0, 5000000 };

	while (now_ns() < deadline) {
		nanosleep(&ts, NULL);
		for (volatile int i = 0; i < 2000; i++)
			;
	}
	return arg;
}

static void *spinner(void *arg)
{
	while (now_ns() < deadline)
		;
	return arg;
}

static void sched(long idle_ms, long busy_ms)
{
	pthread_t th[4];
	int i;

	say("idle");
	deadline = now_ns() + idle_ms * 1000000LL;
	for (i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, sleeper, NULL);
	for (i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	say("busy");
	deadline = now_ns() + busy_ms * 1000000LL;
	for (i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, spinner, NULL);
	for (i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	say("end");
}

static void oom(const char *procs)
{
	FILE *f = fopen(procs, "w");

	if (!f || fprintf(f, "%d\n", getpid()) < 0 || fclose(f) != 0) {
		perror(procs);
		exit(2);
	}
	say("joined");
	expect("go");
	for (;;) {
		char *p = malloc(1 << 20);

		if (p)
			memset(p, 1, 1 << 20);
	}
}

static void leak(long mib, double secs)
{
	typedef int (*malloc_fn)(void **, size_t);
	malloc_fn cmalloc = (malloc_fn)sym(rt, "cudaMalloc");
	long long end = now_ns() + (long long)(secs * 1e9);
	struct timespec ts = { 0, 100000000 };
	long n = 0;
	void *p;

	while (now_ns() < end) {
		if (cmalloc(&p, (size_t)mib << 20) == 0)
			n++;
		nanosleep(&ts, NULL);
	}
	say("leaked allocs=%ld", n);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: cudaprog LIBDIR MODE ...\n");
		return 2;
	}
	libdir = argv[1];
	const char *mode = argv[2];

	if (strcmp(mode, "script") == 0) {
		say("started");
		expect("load");
		load(argc > 3 && strcmp(argv[3], "unlink") == 0);
		say("loaded");
		expect("go");
		script();
	} else if (strcmp(mode, "launches") == 0 && argc > 3) {
		launch_fn launch;
		dim3 g = { 1, 1, 1 }, b = { 32, 1, 1 };
		long n = atol(argv[3]);

		load(0);
		launch = (launch_fn)sym(rt, "cudaLaunchKernel");
		say("loaded");
		expect("go");
		for (long i = 0; i < n; i++)
			launch((const void *)kernel_b, g, b, NULL, 0, NULL);
		say("done");
	} else if (strcmp(mode, "paced") == 0 && argc > 4) {
		load(0);
		say("loaded");
		expect("go");
		paced(atol(argv[3]), atof(argv[4]));
	} else if (strcmp(mode, "leak") == 0 && argc > 4) {
		load(0);
		say("loaded");
		expect("go");
		leak(atol(argv[3]), atof(argv[4]));
	} else if (strcmp(mode, "sched") == 0 && argc > 4) {
		sched(atol(argv[3]), atol(argv[4]));
		return 0;
	} else if (strcmp(mode, "oom") == 0 && argc > 3) {
		oom(argv[3]);
	} else {
		fprintf(stderr, "cudaprog: bad arguments\n");
		return 2;
	}
	/* Stay until the test closes stdin, so that its PID stays followed. */
	while (fgetc(stdin) != EOF)
		;
	return 0;
}
