/*
 * probe_hold: a workload for benches/probe_cost.sh.
 *
 *   probe_hold THREADS MIB SECONDS [frag]
 *
 * Starts THREADS threads; together they malloc MIB MiB in many small blocks (16 to
 * 2032 bytes, ~1 KiB on average, sizes from a fixed per-thread sequence) and write
 * every byte, so the memory is resident and the heap holds ~MIB*1000 blocks. With
 * "frag" each thread then frees every other block: the heap keeps its size but holds
 * ~MIB*500 free chunks that cannot coalesce (what glibc's mallinfo2 walks). Once
 * every thread is done, the program prints "ready" on stdout and everyone sleeps; it
 * exits 0 SECONDS after it started (0: right after "ready").
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static size_t per_thread;
static int frag;
static pthread_barrier_t ready;

static void *hold(void *arg) {
    uint64_t x = 0x9e3779b97f4a7c15ULL * ((uintptr_t)arg + 1);
    size_t cap = per_thread / 512 + 16, n = 0, total = 0;
    void **blocks = malloc(cap * sizeof *blocks);
    if (!blocks) {
        fprintf(stderr, "probe_hold: malloc failed\n");
        exit(2);
    }
    while (total < per_thread && n < cap) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t size = 16 + (size_t)(x % 2017);
        char *p = malloc(size);
        if (!p) {
            fprintf(stderr, "probe_hold: malloc failed\n");
            exit(2);
        }
        memset(p, (int)(n | 1), size);
        blocks[n++] = p;
        total += size;
    }
    if (frag)
        for (size_t i = 1; i < n; i += 2)
            free(blocks[i]);
    pthread_barrier_wait(&ready);
    for (;;)
        pause();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: probe_hold THREADS MIB SECONDS [frag]\n");
        return 2;
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long threads = strtol(argv[1], NULL, 10);
    long mib = strtol(argv[2], NULL, 10);
    double secs = strtod(argv[3], NULL);
    frag = argc > 4 && strcmp(argv[4], "frag") == 0;
    if (threads < 1 || mib < 1) {
        fprintf(stderr, "probe_hold: THREADS and MIB must be at least 1\n");
        return 2;
    }
    per_thread = (size_t)mib * 1048576 / (size_t)threads;
    pthread_barrier_init(&ready, NULL, (unsigned)threads + 1);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (long i = 0; i < threads; i++) {
        pthread_t t;
        if (pthread_create(&t, &attr, hold, (void *)(uintptr_t)i) != 0) {
            fprintf(stderr, "probe_hold: pthread_create failed\n");
            return 2;
        }
    }
    pthread_barrier_wait(&ready);
    printf("ready\n");
    fflush(stdout);
    struct timespec end = t0;
    end.tv_sec += (time_t)secs;
    end.tv_nsec += (long)((secs - (double)(time_t)secs) * 1e9);
    if (end.tv_nsec >= 1000000000L) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &end, NULL) != 0)
        ;
    return 0;
}
