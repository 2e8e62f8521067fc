/*
 * threads_hold: a workload for benches/overhead.sh.
 *
 *   threads_hold [THREADS [SECONDS [KIB_PER_THREAD]]]     (defaults: 1000 30 256)
 *
 * Starts THREADS threads with 64 KiB stacks; each mallocs KIB_PER_THREAD KiB and
 * touches every page, then all of them sleep. The process exits 0 once SECONDS
 * have elapsed since it started (counted from start-up, not from when the threads
 * were ready). It prints one line to stderr when every thread holds its memory.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static size_t per_thread_bytes;
static pthread_barrier_t ready;

static void *hold(void *arg)
{
    (void)arg;
    volatile char *p = malloc(per_thread_bytes);
    if (!p) {
        fprintf(stderr, "threads_hold: malloc failed\n");
        exit(2);
    }
    long page = sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < per_thread_bytes; i += (size_t)page)
        p[i] = (char)i | 1;
    pthread_barrier_wait(&ready);
    for (;;)
        pause();
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    double t0 = now_s();
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 1000;
    double secs = argc > 2 ? strtod(argv[2], NULL) : 30;
    long kib = argc > 3 ? strtol(argv[3], NULL, 10) : 256;
    if (n < 1 || secs <= 0 || kib < 0) {
        fprintf(stderr, "usage: threads_hold [THREADS [SECONDS [KIB_PER_THREAD]]]\n");
        return 2;
    }
    per_thread_bytes = (size_t)kib * 1024;

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_barrier_init(&ready, NULL, (unsigned)n + 1);
    for (long i = 0; i < n; i++) {
        pthread_t t;
        int e = pthread_create(&t, &attr, hold, NULL);
        if (e) {
            fprintf(stderr, "threads_hold: pthread_create #%ld: %s\n", i, strerror(e));
            return 2;
        }
    }
    pthread_barrier_wait(&ready);
    fprintf(stderr, "threads_hold: %ld threads ready (%.2fs)\n", n, now_s() - t0);

    double left;
    while ((left = secs - (now_s() - t0)) > 0) {
        struct timespec ts = {(time_t)left, (long)((left - (time_t)left) * 1e9)};
        nanosleep(&ts, NULL);
    }
    return 0; /* exit() ends every thread */
}
