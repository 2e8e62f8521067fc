/* A stand-in for your C program: builds an in-memory table of COUNT records of
 * RECORD_BYTES each (as a job loading its input would), checks it, prints a summary.
 *
 *   app COUNT
 *
 * The memory gate examples (examples/ci/github-c.yml, gitlab-c.yml) build it twice, from the main branch and
 * from the pull request, and gate the second against the first. memtrial's tests plant a
 * regression by changing RECORD_BYTES in the pull request's copy (1200: +20%, 1020: +2%).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RECORD_BYTES 1000

int main(int argc, char **argv) {
    long count = argc > 1 ? atol(argv[1]) : 60000;
    if (count <= 0)
        return 2;
    unsigned char *table = malloc((size_t)count * RECORD_BYTES);
    if (!table)
        return 1;
    unsigned long sum = 0;
    for (long i = 0; i < count; i++) {
        memset(table + (size_t)i * RECORD_BYTES, (int)(i & 0xff), RECORD_BYTES);
        sum += table[(size_t)i * RECORD_BYTES];
    }
    printf("%ld records of %d bytes, checksum %lu\n", count, RECORD_BYTES, sum);
    free(table);
    return 0;
}
