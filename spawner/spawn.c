/*
 * memtrial's spawner: the small process between memtrial and a run's workload.
 *
 * The kernel's ru_maxrss of a process is the largest RSS of every memory image it had,
 * and a forked child starts as a copy of its parent's pages. Forked from memtrial, a
 * workload would carry memtrial's size as its peak; forked from this program (static,
 * a few dozen KiB of private pages), it carries its own. memtrial builds this file with
 * its normal build, embeds it and runs it from memory (see src/backend/spawn.rs, which
 * also holds the same logic in Rust as the fallback, and the protocol).
 *
 * argv: memtrial __memtrial-spawn <report fd>[:<gate fd>][,nothp] <n> K=V (n times) <program>
 * <argv0> <args...>; with a gate, the workload is forked once memtrial writes to it or closes
 * it; with ",nothp", the workload has transparent huge pages turned off for itself and its
 * children (prctl(PR_SET_THP_DISABLE), kept across exec) before it execs.
 * Reports on <report fd>, one line each: "E <errno>" (exec failed) or "S <pid> <fork ns>"
 * (started; CLOCK_MONOTONIC just before the fork),
 * then "X c|s <code|signal> <user us> <sys us> <maxrss bytes> <minflt> <majflt> <exit ns>", where
 * <exit ns> is CLOCK_MONOTONIC when the workload was reaped: the spawner is not stopped
 * when memtrial is, so the run's end is the workload's own even then.
 * The workload leads a process group of its own, which memtrial signals to stop a run;
 * the spawner ignores the usual stop signals all the same, so that it outlives the
 * workload to report, and the workload gets the default dispositions back.
 * Then it exits as the workload did.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const int stop_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};

static unsigned long long mono_ns(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return 0;
    return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

static unsigned long long usec(struct timeval tv) {
    return (unsigned long long)tv.tv_sec * 1000000ULL + (unsigned long long)tv.tv_usec;
}

int main(int argc, char **argv) {
    if (argc < 6 || strcmp(argv[1], "__memtrial-spawn") != 0) {
        fputs("memtrial: __memtrial-spawn is memtrial's own; it is not for direct use\n", stderr);
        return 2;
    }
    /* "<report fd>" or "<report fd>:<gate fd>": with a gate, the workload is forked only
       once memtrial has written to it or closed it (a probe attaches to this process
       first, and the workload inherits what it attached). */
    char *rest = NULL;
    int report = (int)strtol(argv[2], &rest, 10);
    int gate = (rest && *rest == ':') ? atoi(rest + 1) : -1;
    int nothp = strstr(argv[2], ",nothp") != NULL;
    long n = atol(argv[3]);
    if (n < 0 || 4 + n + 2 > argc) {
        fputs("memtrial: bad spawner arguments\n", stderr);
        return 2;
    }
    fcntl(report, F_SETFD, FD_CLOEXEC);
    for (size_t i = 0; i < sizeof stop_signals / sizeof *stop_signals; i++)
        signal(stop_signals[i], SIG_IGN);
    for (long i = 0; i < n; i++)
        putenv(argv[4 + i]);
    char *program = argv[4 + n];
    char **wargv = &argv[5 + n];

    if (gate >= 0) {
        char go;
        while (read(gate, &go, 1) < 0 && errno == EINTR)
            ;
        close(gate);
    }
    int status_pipe[2];
    if (pipe2(status_pipe, O_CLOEXEC) != 0) {
        dprintf(report, "E %d\n", errno);
        return 127;
    }
    unsigned long long forked = mono_ns();
    pid_t pid = fork();
    if (pid == 0) {
        for (size_t i = 0; i < sizeof stop_signals / sizeof *stop_signals; i++)
            signal(stop_signals[i], SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        /* The workload leads a process group of its own: memtrial signals that group, and
           the spawner, outside it, lives to report. */
        setpgid(0, 0);
        if (nothp && prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0) {
            /* Asked for and refused: the run would not be the variant's. */
            int e = errno;
            ssize_t w = write(status_pipe[1], &e, sizeof e);
            (void)w;
            _exit(127);
        }
        execve(program, wargv, environ);
        int e = errno;
        ssize_t w = write(status_pipe[1], &e, sizeof e);
        (void)w;
        _exit(127);
    }
    close(status_pipe[1]);
    if (pid < 0) {
        dprintf(report, "E %d\n", errno);
        return 127;
    }
    int exec_errno = 0;
    ssize_t r;
    do {
        r = read(status_pipe[0], &exec_errno, sizeof exec_errno);
    } while (r < 0 && errno == EINTR);
    int failed = r == (ssize_t)sizeof exec_errno;
    if (failed)
        dprintf(report, "E %d\n", exec_errno);
    else
        dprintf(report, "S %d %llu\n", (int)pid, forked);

    int st = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &st, 0, &ru) < 0) {
        if (errno != EINTR) {
            st = 127 << 8;
            break;
        }
    }
    unsigned long long exited = mono_ns();
    char kind = WIFSIGNALED(st) ? 's' : 'c';
    int value = WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st);
    dprintf(report, "X %c %d %llu %llu %llu %llu %llu %llu\n", kind, value, usec(ru.ru_utime),
            usec(ru.ru_stime), (unsigned long long)ru.ru_maxrss * 1024ULL,
            (unsigned long long)ru.ru_minflt, (unsigned long long)ru.ru_majflt, exited);
    close(report);
    if (failed)
        return 127;
    if (kind == 's') {
        signal(value, SIG_DFL);
        raise(value);
        return 128 + value;
    }
    return value;
}
