/*
 * memtrial's allocator probe: a small library preloaded into a run's processes after the
 * variant's own allocator. It asks the allocator that answers malloc for its own counters
 * and appends one line per sample to <MEMTRIAL_PROBE_DIR>/<pid>; memtrial reads the files
 * on the run's clock (src/probe/allocator.rs). It defines no malloc, never allocates on its
 * sampling path, runs one thread per process (restarted in a forked child) and does nothing
 * when MEMTRIAL_PROBE_DIR is unset.
 *
 * When it samples: densely at the start and backing off - every 10 ms for the first second,
 * then each gap half again as long as the last, up to MEMTRIAL_PROBE_INTERVAL_MS - and
 * whenever the process reaches a new high of resident memory (2% above the last high, read
 * from /proc/self/statm, a cheap read, every 10 ms for the first second and at most every
 * 50 ms after), so that a sample lies at the peak. All of it within a CPU budget (below),
 * except the rungs: a resident size SAMPLE_RUNG_STEP (2.5%) above every earlier sample's
 * takes a sample whatever the budget says, while one costs under RUNG_MAX_NS - so the last
 * two samples lie within 10% of the highest resident size the process reached, however
 * long it ran.
 *
 * What it touches before its first sample is due (10 ms after the process started): its
 * sampling thread (small stack) and nothing else. The allocator is found, the file opened
 * and the header written by that thread when the first sample is due, so a program that
 * ends sooner (/bin/true) carries no more of the probe than the thread - which is still
 * ~90 KiB (pthread_create faults in a 64 KiB window of libc's read-only data, the TCB and
 * stack): memtrial leaves the library out of a variant's next run after such a run.
 *
 * Line format (tab-separated, "-" where the allocator offers no such figure):
 *   # memtrial-probe 1 <pid> <allocator> <library that defines malloc>
 *   <CLOCK_MONOTONIC ns> <live> <held> <free> <resident> <mapped> <retained> <metadata>
 *   <arenas> <thread cache> <rss>
 * live = bytes the program has allocated and not freed; held = bytes the allocator holds
 * from the system for them; thread cache = bytes of freed blocks the allocator keeps in its
 * per-thread caches (jemalloc: stats.arenas.<all>.tcache_bytes, plus tcache_stashed_bytes;
 * tcmalloc: tcmalloc.current_total_thread_cache_bytes), which live does NOT count: jemalloc's
 * stats.allocated counts them, so live is stats.allocated minus them; rss = this process's
 * resident bytes (statm) when the sample was taken (readers accept lines without it). The
 * sample written at exit is preceded by a "# exit" line.
 *
 * A bounded file, for a long-lived process in production (MEMTRIAL_PROBE_MAX_BYTES=N set
 * and not empty; memtrial run never sets it, it reads the whole file): the file is opened
 * truncated (a reused PID never appends to a dead process's lines), kept under N bytes -
 * when the next line would pass N, the file is truncated and restarted with its header and
 * that line in one write, under the lock, so a reader sees at most one moment without a
 * latest line - and removed at normal exit (the destructor, instead of the exit sample),
 * when the path still names the file this process opened. N is bytes, or KiB, MiB, GiB
 * with a K, M or G suffix; below MIN_MAX_BYTES it is MIN_MAX_BYTES (a header of up to
 * ~700 bytes and a few lines must fit); a value that is not a size is DEFAULT_MAX_BYTES.
 * A process killed (SIGKILL, the OOM killer) or ending in _exit leaves its file: at most
 * N bytes, until its PID is reused.
 *
 * The shape of the holes: when <MEMTRIAL_PROBE_DIR>/holes exists (memtrial makes it for a
 * run; a production deployment does not, and pays nothing), the thread also writes what
 * the allocator says about its free memory to <dir>/holes/<pid>, replaced whole (a
 * temporary file renamed) at each rung of resident memory (RUNG_STEP, 5%, above the last
 * account: whatever the budget says, while one costs under RUNG_MAX_NS) and, within a CPU
 * budget of its own, where its growth pauses 2% above the last account:
 *   # memtrial-holes 1 <pid> <allocator>
 *   ns <CLOCK_MONOTONIC ns>          rss <resident bytes from statm then>
 *   glibc:    "xml" and then malloc_info's XML (free chunks by bin, per arena)
 *   jemalloc: page <bytes>, dirty_pages <n>, muzzy_pages <n>, retained <bytes>, and one
 *             "bin <size> <nregs> <curregs> <curslabs>" per small size class
 *   tcmalloc: central, transfer, thread, pageheap_free, unmapped <bytes>
 *   # end
 * malloc_info writes to a stdio stream, and a stream is made by malloc: in this thread
 * that would make it a glibc arena of its own (one more heap than the program has). So the
 * stream is made once, on the thread that loads the library (or forks), over a buffer of
 * our own, and writes through a cookie to whichever file is open at the time.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NONE UINT64_MAX

typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);
typedef int (*tc_prop_fn)(const char *, size_t *);
typedef void (*mi_info_fn)(size_t *, size_t *, size_t *, size_t *, size_t *, size_t *,
                           size_t *, size_t *);

enum which { GLIBC, JEMALLOC, TCMALLOC, MIMALLOC, UNKNOWN };
static const char *names[] = {"glibc", "jemalloc", "tcmalloc", "mimalloc", "unknown"};

static enum which which;
static mallctl_fn je_ctl;
static tc_prop_fn tc_prop;
static mi_info_fn mi_info;
static char dir[512];
static char lib[512];
static long interval_ms = 1000;
static int fd = -1;
/* MEMTRIAL_PROBE_MAX_BYTES (see the top): 0 when unset, the file then grows unbounded. */
static uint64_t max_bytes;
#define MIN_MAX_BYTES 4096ULL
#define DEFAULT_MAX_BYTES (1ULL << 20)
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

struct figures {
    uint64_t live, held, free, resident, mapped, retained, metadata, arenas, thread_cache;
};

static uint64_t je_size(const char *name) {
    size_t v = 0, len = sizeof v;
    return je_ctl(name, &v, &len, NULL, 0) == 0 ? (uint64_t)v : NONE;
}

static uint64_t tc_size(const char *name) {
    size_t v = 0;
    return tc_prop(name, &v) ? (uint64_t)v : NONE;
}

static void read_figures(struct figures *f) {
    f->live = f->held = f->free = f->resident = f->mapped = f->retained = f->metadata =
        f->arenas = f->thread_cache = NONE;
    switch (which) {
    case GLIBC: {
        struct mallinfo2 m = mallinfo2();
        f->live = m.uordblks + m.hblkhd;
        f->held = m.arena + m.hblkhd;
        f->free = m.fordblks;
        f->mapped = m.hblkhd;
        break;
    }
    case JEMALLOC: {
        uint64_t epoch = 1;
        size_t len = sizeof epoch;
        je_ctl("epoch", &epoch, &len, &epoch, len);
        /* stats.allocated counts the regions parked in thread caches (jemalloc's own stats:
         * curregs "including regions currently cached by tcache"): the program's live bytes
         * are without them. 4096 is MALLCTL_ARENAS_ALL, the sum over arenas. */
        uint64_t allocated = je_size("stats.allocated");
        uint64_t cached = je_size("stats.arenas.4096.tcache_bytes");
        uint64_t stashed = je_size("stats.arenas.4096.tcache_stashed_bytes");
        if (cached != NONE && stashed != NONE)
            cached += stashed;
        f->thread_cache = cached;
        f->live = allocated;
        if (allocated != NONE && cached != NONE)
            f->live = allocated >= cached ? allocated - cached : 0;
        f->metadata = je_size("stats.metadata");
        f->resident = je_size("stats.resident");
        /* Held: the pages of its extents that are resident, active or dirty (freed but
         * not yet purged: jemalloc keeps them until its decay time passes) - what it
         * holds for the heap, like glibc's arenas. Its metadata is not the heap. */
        f->held = je_size("stats.active");
        if (f->held != NONE && f->resident != NONE && f->metadata != NONE &&
            f->resident > f->metadata && f->resident - f->metadata > f->held)
            f->held = f->resident - f->metadata;
        f->mapped = je_size("stats.mapped");
        f->retained = je_size("stats.retained");
        unsigned n = 0;
        size_t nlen = sizeof n;
        if (je_ctl("arenas.narenas", &n, &nlen, NULL, 0) == 0)
            f->arenas = n;
        if (f->live != NONE && f->held != NONE && f->held >= f->live)
            f->free = f->held - f->live;
        break;
    }
    case TCMALLOC: {
        f->live = tc_size("generic.current_allocated_bytes");
        uint64_t heap = tc_size("generic.heap_size");
        uint64_t unmapped = tc_size("tcmalloc.pageheap_unmapped_bytes");
        if (heap != NONE && unmapped != NONE && heap >= unmapped)
            f->held = heap - unmapped;
        f->free = tc_size("tcmalloc.pageheap_free_bytes");
        f->mapped = heap;
        f->retained = unmapped;
        f->thread_cache = tc_size("tcmalloc.current_total_thread_cache_bytes");
        break;
    }
    case MIMALLOC: {
        size_t el, us, sy, rss, peak_rss, commit, peak_commit, faults;
        mi_info(&el, &us, &sy, &rss, &peak_rss, &commit, &peak_commit, &faults);
        f->held = commit;
        f->resident = rss;
        break;
    }
    case UNKNOWN:
        break;
    }
}

/* Appends a decimal or "-" to buf; returns the new length. No allocation. */
static size_t put(char *buf, size_t at, uint64_t v, char sep) {
    char tmp[24];
    size_t n = 0;
    if (v == NONE) {
        tmp[n++] = '-';
    } else {
        do {
            tmp[n++] = (char)('0' + v % 10);
            v /= 10;
        } while (v);
    }
    while (n)
        buf[at++] = tmp[--n];
    buf[at++] = sep;
    return at;
}

/* Appends a string to buf (within cap); returns the new length. */
static size_t put_str(char *buf, size_t at, size_t cap, const char *s) {
    while (*s && at < cap)
        buf[at++] = *s++;
    return at;
}

/* Copies a string into dst (cap bytes, truncated, always terminated). */
static void set_str(char *dst, size_t cap, const char *s) {
    dst[put_str(dst, 0, cap - 1, s)] = '\0';
}

/* Raw system calls, for what runs before the first sample is due: libc's wrappers are pages
 * of libc a small program never touches otherwise, and each new 64 KiB window of libc that
 * is touched (the kernel maps pages around a faulting one) counts in the program's RSS. */
static long raw4(long nr, long a, long b, long c, long d) {
    long ret;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10)
                     : "rcx", "r11", "memory");
    return ret;
}

static uint64_t raw_ns(void) {
    struct timespec ts = {0, 0};
    raw4(SYS_clock_gettime, CLOCK_MONOTONIC, (long)&ts, 0, 0);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t ns_of(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The report file as opened: a program that closes every descriptor (a daemon) and opens
 * another file under the same number must not get our lines. */
static dev_t fd_dev;
static ino_t fd_ino;

static char report_path[600];

/* 1 while fd is the report file. When the program has closed it (and perhaps reused the
 * number), the old number is forgotten (never closed: it is the program's now) and the
 * file is opened again under a new one. */
static int fd_is_ours(void) {
    struct stat st;
    if (fd < 0)
        return 0;
    if (fstat(fd, &st) == 0 && st.st_dev == fd_dev && st.st_ino == fd_ino)
        return 1;
    fd = open(report_path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd >= 0 && (fstat(fd, &st) != 0 || st.st_dev != fd_dev || st.st_ino != fd_ino)) {
        close(fd);
        fd = -1;
    }
    return fd >= 0;
}

/* 1 while report_path still names the report file this process opened (no link followed):
 * not a file another process of the same PID made after ours was removed, nor something
 * the program put there. */
static int path_is_ours(void) {
    struct stat st;
    return report_path[0] && lstat(report_path, &st) == 0 && st.st_dev == fd_dev &&
           st.st_ino == fd_ino;
}

/* The holes: <dir>/holes exists (checked when the library loads); on while it does and the
 * allocator's account can be written. */
static int holes_dir;
static int holes_on;
static FILE *holes_fp;
static char holes_buf[4096];
static int holes_fd = -1;
typedef int (*nametomib_fn)(const char *, size_t *, size_t *);
typedef int (*bymib_fn)(const size_t *, size_t, void *, size_t *, void *, size_t);
static nametomib_fn je_nametomib;
static bymib_fn je_bymib;

static ssize_t holes_cookie_write(void *c, const char *buf, size_t n) {
    (void)c;
    size_t done = 0;
    while (holes_fd >= 0 && done < n) {
        ssize_t w = write(holes_fd, buf + done, n - done);
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    return (ssize_t)n;
}

/* The stream malloc_info writes to; made by the calling thread (see the comment at the top). */
static void make_holes_stream(void) {
    cookie_io_functions_t io = {NULL, holes_cookie_write, NULL, NULL};
    holes_fp = fopencookie(NULL, "w", io);
    if (holes_fp)
        setvbuf(holes_fp, holes_buf, _IOFBF, sizeof holes_buf);
}

static void put_line(const char *key, uint64_t v) {
    char buf[96];
    size_t n = put_str(buf, 0, 64, key);
    buf[n++] = '\t';
    n = put(buf, n, v, '\n');
    ssize_t w = write(holes_fd, buf, n);
    (void)w;
}

/* A value of jemalloc's by mib: name's mib with its index components (at positions
 * i1 and i2, when not 0) replaced. NONE when jemalloc does not answer. width is 4 for
 * uint32_t figures (nregs), else 8. */
static uint64_t je_mib_value(const char *name, size_t i1, size_t v1, size_t i2, size_t v2,
                             int width) {
    size_t mib[8], len = 8;
    if (!je_nametomib || !je_bymib || je_nametomib(name, mib, &len) != 0)
        return NONE;
    if (i1)
        mib[i1] = v1;
    if (i2)
        mib[i2] = v2;
    if (width == 4) {
        uint32_t v = 0;
        size_t vl = sizeof v;
        return je_bymib(mib, len, &v, &vl, NULL, 0) == 0 ? v : NONE;
    }
    size_t v = 0, vl = sizeof v;
    return je_bymib(mib, len, &v, &vl, NULL, 0) == 0 ? (uint64_t)v : NONE;
}

static void holes_body(void) {
    switch (which) {
    case GLIBC: {
        ssize_t w = write(holes_fd, "xml\n", 4);
        (void)w;
        if (holes_fp) {
            malloc_info(0, holes_fp);
            fflush(holes_fp);
        }
        break;
    }
    case JEMALLOC: {
        uint64_t epoch = 1;
        size_t len = sizeof epoch;
        je_ctl("epoch", &epoch, &len, &epoch, len);
        put_line("page", je_size("arenas.page"));
        put_line("dirty_pages", je_size("stats.arenas.4096.pdirty"));
        put_line("muzzy_pages", je_size("stats.arenas.4096.pmuzzy"));
        put_line("retained", je_size("stats.retained"));
        unsigned nbins = 0;
        size_t nl = sizeof nbins;
        if (je_ctl("arenas.nbins", &nbins, &nl, NULL, 0) != 0)
            break;
        for (unsigned j = 0; j < nbins && j < 256; j++) {
            char buf[128];
            size_t n = put_str(buf, 0, 16, "bin\t");
            n = put(buf, n, je_mib_value("arenas.bin.0.size", 2, j, 0, 0, 8), '\t');
            n = put(buf, n, je_mib_value("arenas.bin.0.nregs", 2, j, 0, 0, 4), '\t');
            n = put(buf, n, je_mib_value("stats.arenas.0.bins.0.curregs", 2, 4096, 4, j, 8),
                    '\t');
            n = put(buf, n, je_mib_value("stats.arenas.0.bins.0.curslabs", 2, 4096, 4, j, 8),
                    '\n');
            ssize_t w = write(holes_fd, buf, n);
            (void)w;
        }
        break;
    }
    case TCMALLOC:
        put_line("central", tc_size("tcmalloc.central_cache_free_bytes"));
        put_line("transfer", tc_size("tcmalloc.transfer_cache_free_bytes"));
        put_line("thread", tc_size("tcmalloc.thread_cache_free_bytes"));
        put_line("pageheap_free", tc_size("tcmalloc.pageheap_free_bytes"));
        put_line("unmapped", tc_size("tcmalloc.pageheap_unmapped_bytes"));
        break;
    default:
        break;
    }
}

/* Writes the holes file whole: a temporary file renamed over the last one (under the lock). */
static void holes_snapshot(uint64_t rss_bytes) {
    char tmp[640], final[640];
    size_t n = put_str(final, 0, sizeof final - 40, dir);
    n = put_str(final, n, sizeof final - 32, "/holes/");
    memcpy(tmp, final, n);
    put(final, n, (uint64_t)getpid(), '\0');
    tmp[n] = '.';
    put(tmp, n + 1, (uint64_t)getpid(), '\0');
    holes_fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (holes_fd < 0) {
        holes_on = 0;
        return;
    }
    char head[160];
    n = put_str(head, 0, 64, "# memtrial-holes 1 ");
    n = put(head, n, (uint64_t)getpid(), ' ');
    n = put_str(head, n, 100, names[which]);
    head[n++] = '\n';
    ssize_t w = write(holes_fd, head, n);
    (void)w;
    put_line("ns", ns_of(CLOCK_MONOTONIC));
    put_line("rss", rss_bytes);
    holes_body();
    w = write(holes_fd, "# end\n", 6);
    close(holes_fd);
    holes_fd = -1;
    if (rename(tmp, final) != 0)
        unlink(tmp);
}

/* The report file's header line into head (HEAD_CAP bytes); returns its length. The path
 * and the header are put together by hand: snprintf's machinery is pages of libc that a
 * small program would otherwise never touch, and they count in its peak RSS. */
#define HEAD_CAP 700
static size_t put_head(char *head) {
    size_t n = put_str(head, 0, HEAD_CAP - 64, "# memtrial-probe 1 ");
    n = put(head, n, (uint64_t)getpid(), ' ');
    n = put_str(head, n, HEAD_CAP - 64, names[which]);
    head[n++] = ' ';
    n = put_str(head, n, HEAD_CAP - 1, lib[0] ? lib : "-");
    head[n++] = '\n';
    return n;
}

/* Bytes in the report file as this process wrote them: a bounded file's size. */
static uint64_t written;

/* Writes one line to the report file (under the lock). A bounded file the line would take
 * past max_bytes is restarted first: truncated, then its header and the line in one write.
 * A line that cannot be written within the bound is dropped. */
static void report_line(const char *line, size_t n) {
    char buf[HEAD_CAP + 256];
    if (max_bytes && written + n > max_bytes) {
        if (n > sizeof buf - HEAD_CAP || ftruncate(fd, 0) != 0)
            return;
        size_t h = put_head(buf);
        memcpy(buf + h, line, n);
        line = buf;
        n += h;
        written = 0;
    }
    ssize_t w = write(fd, line, n);
    if (w > 0)
        written += (uint64_t)w;
}

/* rss: this process's resident bytes when the sample is taken (NONE: unknown). */
static void sample_locked(uint64_t rss) {
    struct figures f;
    char buf[288];
    if (!fd_is_ours())
        return;
    read_figures(&f);
    size_t n = 0;
    n = put(buf, n, ns_of(CLOCK_MONOTONIC), '\t');
    n = put(buf, n, f.live, '\t');
    n = put(buf, n, f.held, '\t');
    n = put(buf, n, f.free, '\t');
    n = put(buf, n, f.resident, '\t');
    n = put(buf, n, f.mapped, '\t');
    n = put(buf, n, f.retained, '\t');
    n = put(buf, n, f.metadata, '\t');
    n = put(buf, n, f.arenas, '\t');
    n = put(buf, n, f.thread_cache, '\t');
    n = put(buf, n, rss, '\n');
    report_line(buf, n);
}

static void sample(uint64_t rss) {
    pthread_mutex_lock(&lock);
    sample_locked(rss);
    pthread_mutex_unlock(&lock);
}

/* The schedule. The first sample is due FIRST_NS after the process started; samples are
 * DENSE_NS apart for DENSE_FOR_NS, then each gap is half again as long as the last, up to
 * the configured interval. Between samples /proc/self/statm is read every WATCH gap (DENSE_NS
 * while dense, then growing likewise up to WATCH_MAX_NS, and DENSE_NS again after each new
 * high); a resident size HIGH_STEP (1/50: 2%) above the last high takes a sample at once,
 * and so does, within the budget, the top of a climb: a read no higher than the one before
 * it, yet 1/TOP_STEP (0.5%) above every earlier sample's. Without it the top of a climb fell
 * between two samples once the gaps had grown, and the next came after the job had freed
 * part of its peak (a job peaking after its first second, 8 threads: live at the peak
 * 74.3 MiB in 3 of 5 runs against 78.7 sampled every 10 ms; with it 77.2 or 78.7). */
#define FIRST_NS 10000000ULL /* FIRST_SAMPLE_MS in src/probe/allocator.rs */
#define DENSE_NS 10000000ULL
#define DENSE_FOR_NS 1000000000ULL
#define WATCH_MAX_NS 50000000ULL
#define HIGH_STEP 50
#define TOP_STEP 200
/* The rungs: a resident size 1/RUNG_STEP (5%) above every earlier account takes one at
 * once, outside the budgets, while the last read of its kind cost under RUNG_MAX_NS; a
 * sample's rungs are half as far apart (1/SAMPLE_RUNG_STEP, 2.5%), since live/held at the
 * peak needs two samples within 10% of it: at 5%, a job that grows until it exits left one
 * (a Python batch growing 30 MB/s to 96 MiB: samples at 86 and 92 MiB, none after). From
 * 1 MiB to 1 GiB that is at most ~140 accounts and ~280 samples, and since a read's cost
 * grows with the heap, their sum is about 21 accounts and 41 samples at the peak
 * (1 + 1/1.05 + 1/1.05^2 ...): bounded by how far the process grows, not by how long it
 * runs. A read dearer than RUNG_MAX_NS (glibc's walk over ~80k free chunks) keeps to the
 * budget. */
#define RUNG_STEP 20
#define SAMPLE_RUNG_STEP 40
#define RUNG_MAX_NS 10000000ULL
/* Between rungs, an account is also taken where growth pauses this far (1/50: 2%) above
 * the last one, within the holes' budget: the top of a plateau. */
#define HOLES_STEP 50

/* The samples' CPU budget: BUDGET_PPM (0.15%) of one core over the process's life plus a
 * 30 ms burst, so that a short run gets every sample while a long one stays within the
 * budget. Reading an allocator is cheap except glibc's mallinfo2 on a fragmented heap, which
 * walks every free chunk of every arena (about 14 ms per sample at 100k free chunks): then
 * samples are skipped until the budget allows one - but never a rung (above), which comes
 * on top. Only the samples' own CPU time counts: the watch between them (a statm read, the
 * checks that the descriptors are still ours, the sleep: 20 wakes a second at most) costs
 * what its schedule says whatever the budget - about 0.1% of a core on a 2-core VM whose
 * system calls are dear (54 us a wake, measured from the thread's schedstat) - and
 * counting it in the budget left a glibc server's later samples none of it: 2 in the
 * later 6 s of a window of load where 4 a second were due. */
#define BUDGET_PPM 1500
#define BURST_NS 30000000ULL
/* The holes' accounts have a budget of their own, beside the samples': 0.1% of a core plus a
 * 60 ms burst. glibc's malloc_info walks every free chunk, as mallinfo2 does (both about
 * 120 ns per free chunk: 10 ms at 85k), and a fragmented glibc heap spends the samples'
 * burst in its first second - just when a short run reaches its peak. */
#define HOLES_PPM 1000
#define HOLES_BURST_NS 60000000ULL

/* When this process started (the constructor, or the fork that made it). */
static uint64_t born_ns;
/* The allocator is known (survives a fork: the child has the parent's allocator). */
static int resolved;
/* /proc/self/statm, opened by the sampling thread; -1 when unreadable. */
static int statm_fd = -1;

static void find_malloc(void **base);
static void *defined_in(void *base, const char *name);

/* Which allocator answers malloc, checked against the library that defines it. */
static void resolve(void) {
    void *base = NULL;
    find_malloc(&base);
    /* Looked up in the object that defines malloc only: a program linking jemalloc's
     * mallctl while malloc is glibc's is glibc. No dlsym: a failed one makes dlerror's
     * message with malloc, and a malloc on this thread would give it a glibc arena of its
     * own - one heap more than the program has. */
    je_ctl = (mallctl_fn)defined_in(base, "mallctl");
    tc_prop = (tc_prop_fn)defined_in(base, "MallocExtension_GetNumericProperty");
    mi_info = (mi_info_fn)defined_in(base, "mi_process_info");
    je_nametomib = (nametomib_fn)defined_in(base, "mallctlnametomib");
    je_bymib = (bymib_fn)defined_in(base, "mallctlbymib");
    if (je_ctl)
        which = JEMALLOC;
    else if (tc_prop)
        which = TCMALLOC;
    else if (mi_info)
        which = MIMALLOC;
    else if (strstr(lib, "/libc.so") || strstr(lib, "/libc-"))
        which = GLIBC;
    else
        which = UNKNOWN;
    resolved = 1;
}

/* Opens this process's file and writes its header (under the lock); the path is put
 * together by hand, as the header is (put_head). */
static void open_report(void) {
    char path[600];
    size_t n = put_str(path, 0, sizeof path - 24, dir);
    path[n++] = '/';
    n = put(path, n, (uint64_t)getpid(), '\0');
    /* Bounded: truncated, so that a reused PID never appends to a dead process's lines. */
    fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (max_bytes ? O_TRUNC : 0),
              0644);
    if (fd < 0)
        return;
    set_str(report_path, sizeof report_path, path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        fd = -1;
        return;
    }
    fd_dev = st.st_dev;
    fd_ino = st.st_ino;
    char head[HEAD_CAP];
    written = 0;
    report_line(head, put_head(head));
}

static dev_t statm_dev;
static ino_t statm_ino;

/* 1 while statm_fd is still /proc/self/statm as opened (see fd_is_ours). */
static int statm_is_ours(void) {
    struct stat st;
    if (statm_fd >= 0 &&
        (fstat(statm_fd, &st) != 0 || st.st_dev != statm_dev || st.st_ino != statm_ino))
        statm_fd = -1;
    return statm_fd >= 0;
}

/* Resident pages of this process from statm (its second field); 0 when unreadable. */
static uint64_t resident_pages(void) {
    char buf[128];
    if (!statm_is_ours())
        return 0;
    ssize_t n = pread(statm_fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *p = buf;
    while (*p && *p != ' ')
        p++;
    uint64_t v = 0;
    while (*p == ' ')
        p++;
    while (*p >= '0' && *p <= '9')
        v = v * 10 + (uint64_t)(*p++ - '0');
    return v;
}

static void sleep_until(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
    while (raw4(SYS_clock_nanosleep, CLOCK_MONOTONIC, TIMER_ABSTIME, (long)&ts, 0) != 0) {
    }
}

/* The next gap after `gap`: DENSE_NS within the dense start, then half again as long, up to
 * `cap`. */
static uint64_t next_gap(uint64_t gap, uint64_t now, uint64_t cap) {
    if (now - born_ns < DENSE_FOR_NS)
        return DENSE_NS < cap ? DENSE_NS : cap;
    gap += gap / 2;
    return gap < cap ? gap : cap;
}

static void *loop(void *arg) {
    (void)arg;
    uint64_t interval_ns = (uint64_t)interval_ms * 1000000ULL;
    /* Nothing of the probe but this thread exists before the first sample is due. */
    sleep_until(born_ns + FIRST_NS);
    pthread_mutex_lock(&lock);
    if (!resolved)
        resolve();
    open_report();
    pthread_mutex_unlock(&lock);
    if (fd < 0)
        return NULL;
    statm_fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (statm_fd >= 0 && fstat(statm_fd, &st) == 0) {
        statm_dev = st.st_dev;
        statm_ino = st.st_ino;
    } else {
        statm_fd = -1;
    }
    /* The highest resident pages seen (for the 2% highs) and at a sample (for the rungs). */
    uint64_t high = 0, rung = 0;
    /* The holes: resident pages at the last account and at the last read. */
    uint64_t holes_rss = 0, prev_rss = 0;
    /* CPU time (ns) of the last sample and the last account: a rung is taken outside the
     * budget only while its kind costs under RUNG_MAX_NS. */
    uint64_t last_cost = 0, holes_cost = 0;
    /* This thread's CPU time on samples and on accounts within their budgets (rungs come
     * on top of them). */
    uint64_t sample_cpu = 0, holes_cpu = 0;
    uint64_t page = (uint64_t)getpagesize();
    /* glibc's account needs the stream; the others write to the file directly. */
    holes_on = holes_dir && (which != GLIBC || holes_fp != NULL);
    uint64_t gap = DENSE_NS < interval_ns ? DENSE_NS : interval_ns;
    uint64_t watch = DENSE_NS;
    uint64_t now = ns_of(CLOCK_MONOTONIC);
    uint64_t next_sample = now;
    for (;;) {
        uint64_t allowed = BURST_NS + (now - born_ns) / 1000000 * BUDGET_PPM;
        uint64_t holes_allowed = HOLES_BURST_NS + (now - born_ns) / 1000000 * HOLES_PPM;
        int figures_ok = sample_cpu <= allowed;
        int holes_ok = holes_on && holes_cpu <= holes_allowed;
        /* statm: ~3 us a read, at most every 50 ms after the first second (outside the budget). */
        uint64_t rss = resident_pages();
        int new_high = rss > high + high / HIGH_STEP;
        if (rss > high)
            high = rss;
        int at_rung = rss > rung + rung / SAMPLE_RUNG_STEP && last_cost <= RUNG_MAX_NS;
        int scheduled = now >= next_sample;
        int at_top = rss && rss <= prev_rss && rss > rung + rung / TOP_STEP;
        if (at_rung || (figures_ok && (new_high || scheduled || at_top))) {
            uint64_t cpu = ns_of(CLOCK_THREAD_CPUTIME_ID);
            sample(rss ? rss * page : NONE);
            last_cost = ns_of(CLOCK_THREAD_CPUTIME_ID) - cpu;
            if (!at_rung)
                sample_cpu += last_cost;
            if (rss > rung)
                rung = rss;
        }
        /* Over budget, a scheduled sample is skipped; the schedule goes on. */
        if (scheduled) {
            gap = next_gap(gap, now, interval_ns);
            next_sample = now + gap;
        }
        if (holes_on && rss) {
            int holes_rung = rss > holes_rss + holes_rss / RUNG_STEP && holes_cost <= RUNG_MAX_NS;
            int top = holes_ok && rss > holes_rss + holes_rss / HOLES_STEP && rss <= prev_rss;
            if (holes_rung || top) {
                uint64_t before = ns_of(CLOCK_THREAD_CPUTIME_ID);
                pthread_mutex_lock(&lock);
                holes_snapshot(rss * page);
                pthread_mutex_unlock(&lock);
                holes_cost = ns_of(CLOCK_THREAD_CPUTIME_ID) - before;
                if (!holes_rung)
                    holes_cpu += holes_cost;
                holes_rss = rss;
            }
        }
        if (rss)
            prev_rss = rss;
        uint64_t watch_cap = WATCH_MAX_NS < interval_ns ? WATCH_MAX_NS : interval_ns;
        if (new_high)
            watch = DENSE_NS < watch_cap ? DENSE_NS : watch_cap;
        else
            watch = next_gap(watch, now, watch_cap);
        uint64_t wake = now + watch;
        if (wake > next_sample)
            wake = next_sample;
        sleep_until(wake);
        now = ns_of(CLOCK_MONOTONIC);
    }
    return NULL;
}

/* Starts this process's sampling thread (a small stack; it touches nothing else until its
 * first sample is due). */
static void start(void) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    int failed = pthread_create(&t, &attr, loop, NULL);
    (void)failed; /* No thread: no reports, and memtrial says so. */
    pthread_attr_destroy(&attr);
}

/* In a forked child only the forking thread exists: a new file and thread of its own,
 * its first sample due FIRST_NS after the fork. */
static void after_fork_child(void) {
    pthread_mutex_init(&lock, NULL);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == fd_dev && st.st_ino == fd_ino)
        close(fd);
    if (statm_is_ours())
        close(statm_fd);
    fd = statm_fd = -1;
    /* The parent's file is the parent's: this child never removes it at exit. */
    report_path[0] = '\0';
    /* An account the parent was writing when it forked is the parent's. */
    if (holes_fd >= 0)
        close(holes_fd);
    holes_fd = -1;
    /* The parent's stream may be mid-write on a thread this child does not have: a new
     * one, made on this (the forking) thread. */
    if (holes_fp)
        make_holes_stream();
    born_ns = raw_ns();
    start();
}

/* The address of the symbol `name` defined by the loaded object `i`, from its own dynamic
 * symbol table (through its GNU hash table, or every symbol when it has only the SysV
 * one); NULL when it defines none. A walk over what the loader mapped: no dlsym. */
static void *symbol_of(struct dl_phdr_info *i, const char *name) {
    const ElfW(Dyn) *dyn = NULL;
    for (int k = 0; k < i->dlpi_phnum; k++)
        if (i->dlpi_phdr[k].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(i->dlpi_addr + i->dlpi_phdr[k].p_vaddr);
    if (!dyn)
        return NULL;
    uintptr_t gnu = 0, sysv = 0, sym = 0, str = 0;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        /* The loader relocates these in place for libraries; not for every object (the
         * vDSO): an address below the object's is an offset. */
        uintptr_t v = dyn->d_un.d_ptr;
        if (v < i->dlpi_addr)
            v += i->dlpi_addr;
        if (dyn->d_tag == DT_GNU_HASH)
            gnu = v;
        else if (dyn->d_tag == DT_HASH)
            sysv = v;
        else if (dyn->d_tag == DT_SYMTAB)
            sym = v;
        else if (dyn->d_tag == DT_STRTAB)
            str = v;
    }
    if (!sym || !str)
        return NULL;
    const ElfW(Sym) *syms = (const ElfW(Sym) *)sym;
    const char *strs = (const char *)str;
#define DEFINES(s)                                                                            \
    ((s)->st_shndx != SHN_UNDEF && (s)->st_value &&                                           \
     (ELF64_ST_TYPE((s)->st_info) == STT_FUNC || ELF64_ST_TYPE((s)->st_info) == STT_GNU_IFUNC) && \
     strcmp(strs + (s)->st_name, name) == 0)
    if (gnu) {
        const uint32_t *h = (const uint32_t *)gnu;
        uint32_t nbuckets = h[0], symoffset = h[1], bloom_size = h[2];
        const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)&h[4] + bloom_size);
        const uint32_t *chain = buckets + nbuckets;
        uint32_t hash = 5381;
        for (const char *c = name; *c; c++)
            hash = hash * 33 + (uint8_t)*c;
        if (!nbuckets)
            return NULL;
        uint32_t idx = buckets[hash % nbuckets];
        if (idx < symoffset)
            return NULL;
        for (;; idx++) {
            uint32_t ch = chain[idx - symoffset];
            if ((ch | 1) == (hash | 1) && DEFINES(&syms[idx]))
                return (void *)(i->dlpi_addr + syms[idx].st_value);
            if (ch & 1)
                return NULL;
        }
    }
    if (sysv) {
        uint32_t n = ((const uint32_t *)sysv)[1];
        for (uint32_t k = 0; k < n; k++)
            if (DEFINES(&syms[k]))
                return (void *)(i->dlpi_addr + syms[k].st_value);
    }
#undef DEFINES
    return NULL;
}

/* The start of an object's first PT_LOAD segment: its "base" below. */
static uintptr_t base_of(struct dl_phdr_info *i) {
    uintptr_t first = 0;
    for (int k = 0; k < i->dlpi_phnum; k++) {
        const ElfW(Phdr) *ph = &i->dlpi_phdr[k];
        uintptr_t lo = i->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && (!first || lo < first))
            first = lo;
    }
    return first;
}

struct symbol_at {
    uintptr_t base;
    const char *name;
    void *found;
};

static int symbol_at_cb(struct dl_phdr_info *i, size_t size, void *data) {
    (void)size;
    struct symbol_at *s = data;
    if (base_of(i) != s->base)
        return 0;
    s->found = symbol_of(i, s->name);
    return 1;
}

/* The symbol `name` as defined by the object loaded at base (NULL when none). */
static void *defined_in(void *base, const char *name) {
    struct symbol_at s = {(uintptr_t)base, name, NULL};
    if (base)
        dl_iterate_phdr(symbol_at_cb, &s);
    return s.found;
}

/* The first object in the loader's order (the program, the preloaded libraries, then the
 * rest: the order symbols are looked up in) whose own symbol table defines malloc - what
 * the program's calls reach. A program that only takes malloc's address has an undefined
 * symbol with a value (a PLT stub), which defines nothing. */
struct first_def {
    int index;
    const char *name;
    uintptr_t base;
};

static int first_def_cb(struct dl_phdr_info *i, size_t size, void *data) {
    (void)size;
    struct first_def *d = data;
    d->index++;
    if (!symbol_of(i, "malloc"))
        return 0;
    d->name = i->dlpi_name ? i->dlpi_name : "";
    d->base = base_of(i);
    return 1;
}

/* The object whose definition of malloc the program's calls reach (the first that defines
 * it, see first_def_cb), into lib; its base into *base. No dlsym (see resolve). */
static void find_malloc(void **base) {
    struct first_def d = {0, NULL, 0};
    dl_iterate_phdr(first_def_cb, &d);
    if (!d.name)
        return;
    if (d.name[0]) {
        set_str(lib, sizeof lib, d.name);
    } else {
        /* The program itself defines malloc: its path. */
        ssize_t n = readlink("/proc/self/exe", lib, sizeof lib - 1);
        lib[n > 0 ? n : 0] = '\0';
    }
    *base = (void *)d.base;
}

/* MEMTRIAL_PROBE_MAX_BYTES, parsed by hand: digits, then optionally K, M or G (binary;
 * "Ki", "Mi", "Gi" as Kubernetes writes them), and nothing else. Below MIN_MAX_BYTES it is
 * MIN_MAX_BYTES; anything else is DEFAULT_MAX_BYTES: the user asked for a bound. */
static uint64_t parse_size(const char *s) {
    const uint64_t cap = 1ULL << 40;
    uint64_t v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++)
        if (v < cap)
            v = v * 10 + (uint64_t)(*p - '0');
    if (p == s)
        return DEFAULT_MAX_BYTES;
    int shift = 0;
    if (*p == 'K' || *p == 'k')
        shift = 10;
    else if (*p == 'M')
        shift = 20;
    else if (*p == 'G')
        shift = 30;
    if (shift && *++p == 'i')
        p++;
    if (*p)
        return DEFAULT_MAX_BYTES;
    v = v >= cap >> shift ? cap : v << shift;
    return v < MIN_MAX_BYTES ? MIN_MAX_BYTES : v;
}

/* Trimming (a variant's trim:DURATION): with MEMTRIAL_TRIM_MS=N set (N >= 10), a thread of
 * its own calls malloc_trim(0) every N ms, the first N ms after the process started (or
 * forked), independently of the sampling above (MEMTRIAL_PROBE_DIR may be unset: a
 * production deployment that only trims). With MEMTRIAL_TRIM_DIR set it also writes what
 * each trim did to <MEMTRIAL_TRIM_DIR>/<pid>:
 *   # memtrial-trim 1 <pid> <allocator> <interval ms>
 *   <CLOCK_MONOTONIC ns> <resident before> <resident after> <thread CPU ns> <wall ns> <returned>
 * resident bytes from /proc/self/statm just before and after the call (other threads'
 * activity meanwhile included), the CPU time this thread spent inside malloc_trim, the call's
 * wall time (other threads wait on the arena locks meanwhile), and malloc_trim's own answer
 * (1: it released memory). malloc_trim is glibc's: where another allocator answers malloc,
 * the header names it and nothing is trimmed. No allocation on this path either.
 * With MEMTRIAL_TRIM_DIR set and no schedule (MEMTRIAL_TRIM_MS unset or below 10), the thread
 * trims only when asked: once a second it removes <MEMTRIAL_TRIM_DIR>/<pid>.request, and a
 * removal that succeeds (`memtrial inspect PID --trim` made the file) is one call. */
static long trim_ms;
static char trim_dir[512];
static uint64_t trim_born_ns;

static uint64_t trim_resident(int fd) {
    char buf[128];
    ssize_t n = fd >= 0 ? pread(fd, buf, sizeof buf - 1, 0) : -1;
    if (n <= 0)
        return NONE;
    buf[n] = '\0';
    const char *p = buf;
    while (*p && *p != ' ')
        p++;
    while (*p == ' ')
        p++;
    uint64_t v = 0;
    while (*p >= '0' && *p <= '9')
        v = v * 10 + (uint64_t)(*p++ - '0');
    return v * (uint64_t)getpagesize();
}

/* Opens this process's trim account and writes its header; -1 without MEMTRIAL_TRIM_DIR. */
static int trim_open(void) {
    if (!trim_dir[0])
        return -1;
    char path[600];
    size_t n = put_str(path, 0, sizeof path - 24, trim_dir);
    path[n++] = '/';
    put(path, n, (uint64_t)getpid(), '\0');
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    char head[160];
    n = put_str(head, 0, 64, "# memtrial-trim 1 ");
    n = put(head, n, (uint64_t)getpid(), ' ');
    n = put_str(head, n, 100, names[which]);
    head[n++] = ' ';
    n = put(head, n, (uint64_t)trim_ms, '\n');
    ssize_t w = write(fd, head, n);
    (void)w;
    return fd;
}

/* One call of malloc_trim(0), and its line in the account (fd; none when -1). */
static void trim_once(int fd, int statm) {
    uint64_t before = trim_resident(statm);
    uint64_t cpu = ns_of(CLOCK_THREAD_CPUTIME_ID), wall = ns_of(CLOCK_MONOTONIC);
    int released = malloc_trim(0);
    uint64_t wall_end = ns_of(CLOCK_MONOTONIC);
    uint64_t cpu_used = ns_of(CLOCK_THREAD_CPUTIME_ID) - cpu;
    uint64_t after = trim_resident(statm);
    if (fd < 0)
        return;
    char line[160];
    size_t n = put(line, 0, wall_end, '\t');
    n = put(line, n, before, '\t');
    n = put(line, n, after, '\t');
    n = put(line, n, cpu_used, '\t');
    n = put(line, n, wall_end - wall, '\t');
    n = put(line, n, (uint64_t)released, '\n');
    ssize_t w = write(fd, line, n);
    (void)w;
}

static void *trim_loop(void *arg) {
    (void)arg;
    uint64_t every = (uint64_t)trim_ms * 1000000ULL;
    sleep_until(trim_born_ns + FIRST_NS);
    pthread_mutex_lock(&lock);
    if (!resolved)
        resolve();
    pthread_mutex_unlock(&lock);
    int fd = trim_open();
    if (which != GLIBC) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    int statm = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (!trim_ms) {
        /* On request only: <dir>/<pid>.request, looked for once a second. */
        char req[600];
        size_t n = put_str(req, 0, sizeof req - 40, trim_dir);
        req[n++] = '/';
        n = put(req, n, (uint64_t)getpid(), '.');
        n = put_str(req, n, sizeof req - 1, "request");
        req[n] = '\0';
        for (uint64_t k = 1;; k++) {
            sleep_until(trim_born_ns + k * 1000000000ULL);
            if (unlink(req) == 0)
                trim_once(fd, statm);
        }
    }
    for (uint64_t k = 1;; k++) {
        sleep_until(trim_born_ns + k * every);
        trim_once(fd, statm);
    }
    return NULL;
}

static void trim_start(void) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    trim_born_ns = raw_ns();
    int failed = pthread_create(&t, &attr, trim_loop, NULL);
    (void)failed; /* No thread: no account, and memtrial says the trims did not happen. */
    pthread_attr_destroy(&attr);
}

/* In a forked child: a trimming thread of its own (the parent's account is the parent's). */
static void trim_after_fork(void) {
    trim_start();
}

/* MEMTRIAL_TRIM_MS and MEMTRIAL_TRIM_DIR, parsed by hand; the thread started when either
 * is set. */
static void trim_init(void) {
    const char *ms = getenv("MEMTRIAL_TRIM_MS");
    long v = 0;
    while (ms && *ms >= '0' && *ms <= '9' && v < 100000000L)
        v = v * 10 + (*ms++ - '0');
    const char *d = getenv("MEMTRIAL_TRIM_DIR");
    size_t n = 0;
    while (d && d[n] && n < sizeof trim_dir)
        n++;
    if (d && n && n < sizeof trim_dir)
        memcpy(trim_dir, d, n + 1);
    /* A schedule, or on request only (a directory to be asked in). */
    if (v < 10 && !trim_dir[0])
        return;
    trim_ms = v < 10 ? 0 : v;
    pthread_atfork(NULL, NULL, trim_after_fork);
    trim_start();
}

/* Only what the thread needs: the directory, the interval and the bound (parsed by hand),
 * the start time (a raw clock read) and the thread itself. */
__attribute__((constructor)) static void init(void) {
    trim_init();
    const char *d = getenv("MEMTRIAL_PROBE_DIR");
    size_t n = 0;
    while (d && d[n] && n < sizeof dir)
        n++;
    if (!d || !n || n >= sizeof dir)
        return;
    born_ns = raw_ns();
    memcpy(dir, d, n + 1);
    const char *iv = getenv("MEMTRIAL_PROBE_INTERVAL_MS");
    long v = 0;
    while (iv && *iv >= '0' && *iv <= '9' && v < 100000000L)
        v = v * 10 + (*iv++ - '0');
    if (v >= 10)
        interval_ms = v;
    const char *mb = getenv("MEMTRIAL_PROBE_MAX_BYTES");
    if (mb && *mb)
        max_bytes = parse_size(mb);
    /* The holes' stream for glibc's malloc_info, made here on the loading thread. */
    char hd[600];
    size_t hn = put_str(hd, 0, sizeof hd - 8, dir);
    hn = put_str(hd, hn, sizeof hd - 1, "/holes");
    hd[hn] = '\0';
    holes_dir = raw4(SYS_access, (long)hd, W_OK, 0, 0) == 0;
    if (holes_dir)
        make_holes_stream();
    pthread_atfork(NULL, NULL, after_fork_child);
    start();
}

/* A last sample at exit: a batch job's final state, marked as such (the program has
 * freed what it frees before exit, so it is not its peak). Only when the sampling had
 * begun: a process that ends before its first sample is due leaves no file. A bounded
 * file (production: nobody reads an exit sample) is removed instead, when its path still
 * names the file this process opened, and nothing more is written. */
__attribute__((destructor)) static void fini(void) {
    pthread_mutex_lock(&lock);
    if (max_bytes) {
        if (path_is_ours())
            unlink(report_path);
        if (fd_is_ours())
            close(fd);
        fd = -1;
    } else if (fd_is_ours()) {
        ssize_t w = write(fd, "# exit\n", 7);
        (void)w;
        uint64_t pages = resident_pages();
        sample_locked(pages ? pages * (uint64_t)getpagesize() : NONE);
    }
    pthread_mutex_unlock(&lock);
}
