/* CLinux: GNU extensions of glibc that Swift's Glibc module hides (it is built
 * without _GNU_SOURCE). */
#define _GNU_SOURCE 1
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fcntl.h>
#include "clinux.h"

int vcshim_accept4(int fd, struct sockaddr *addr, unsigned int *len, int flags) {
    return accept4(fd, addr, (socklen_t *)len, flags);
}
int vcshim_pipe2(int fds[2], int flags) { return pipe2(fds, flags); }
void vcshim_set_thread_name(const char *name) {
    char buf[16];
    strncpy(buf, name, 15);
    buf[15] = 0;
    pthread_setname_np(pthread_self(), buf);
}

