/* An LD_PRELOAD library that makes fsync / fdatasync fail with EIO, for storage fault tests
 * (tests/integration/test_storage_faults.py builds and loads it into a broker process).
 *
 * It fails only the calls on files whose path contains $FSYNC_FAULT_MATCH, and only once the
 * file named by $FSYNC_FAULT_ARMED exists, so a broker can start normally and the test decides
 * when the disk "breaks". Every other call goes to the C library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int broken(int fd) {
    const char *armed = getenv("FSYNC_FAULT_ARMED");
    const char *match = getenv("FSYNC_FAULT_MATCH");
    char link[64], path[4096];
    ssize_t n;
    if (armed == NULL || match == NULL || access(armed, F_OK) != 0)
        return 0;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, path, sizeof path - 1);
    if (n < 0)
        return 0;
    path[n] = '\0';
    return strstr(path, match) != NULL;
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (broken(fd)) {
        errno = EIO;
        return -1;
    }
    if (real == NULL)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}

int fsync(int fd) {
    static int (*real)(int);
    if (broken(fd)) {
        errno = EIO;
        return -1;
    }
    if (real == NULL)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real(fd);
}
