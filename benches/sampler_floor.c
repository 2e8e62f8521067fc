/*
 * The least CPU any sampler at a given interval costs on this machine: wake every
 * INTERVAL_MS, read /proc/PID/status through a kept descriptor (one pread), sleep again.
 * benches/overhead.sh runs it beside memtrial, so memtrial's own figure can be read
 * against what the machine charges for a wake-up alone (on a VM that can be most of it).
 *
 *   sampler_floor PID INTERVAL_MS SECONDS    prints the % of one core it used
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: sampler_floor PID INTERVAL_MS SECONDS\n");
        return 2;
    }
    char path[64], buf[16384];
    snprintf(path, sizeof path, "/proc/%s/status", argv[1]);
    long interval_ms = atol(argv[2]), secs = atol(argv[3]);
    if (interval_ms <= 0 || secs <= 0)
        return 2;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    long ticks = secs * 1000 / interval_ms;
    for (long i = 0; i < ticks; i++) {
        if (pread(fd, buf, sizeof buf, 0) <= 0)
            break;
        next.tv_nsec += interval_ms * 1000000L;
        while (next.tv_nsec >= 1000000000L) {
            next.tv_nsec -= 1000000000L;
            next.tv_sec++;
        }
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) != 0) {
        }
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
                 ru.ru_stime.tv_usec / 1e6;
    printf("%.3f\n", 100.0 * cpu / (double)secs);
    return 0;
}
