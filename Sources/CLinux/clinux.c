/* CLinux: GNU extensions of glibc and Linux-only calls that Swift's Glibc module hides
 * (it is built without _GNU_SOURCE and has no <sys/epoll.h>). */
#define _GNU_SOURCE 1
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>
#include <sys/socket.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include "clinux.h"

_Static_assert(sizeof(struct vcshim_mmsghdr) == sizeof(struct mmsghdr), "mmsghdr layout");
_Static_assert(offsetof(struct vcshim_mmsghdr, msg_len) == offsetof(struct mmsghdr, msg_len), "mmsghdr layout");

int vcshim_accept4(int fd, struct sockaddr *addr, unsigned int *len, int flags) {
    return accept4(fd, addr, (socklen_t *)len, flags);
}
int vcshim_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }
int vcshim_unacknowledged_bytes(int fd) {
    int n = 0;
    return ioctl(fd, SIOCOUTQ, &n) == 0 ? n : -1;
}
void vcshim_set_thread_name(const char *name) {
    char buf[16];
    strncpy(buf, name, 15);
    buf[15] = 0;
    pthread_setname_np(pthread_self(), buf);
}
int vcshim_pin_thread_to_cpus(const int *cpus, int count) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < count; i++) {
        if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE) { errno = EINVAL; return -1; }
        CPU_SET(cpus[i], &set);
    }
    return sched_setaffinity(0, sizeof set, &set);
}
int vcshim_allowed_cpus(int *out, int max) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < max; c++) if (CPU_ISSET(c, &set)) out[n++] = c;
    return n;
}

const uint32_t vcshim_epollin = EPOLLIN;
const uint32_t vcshim_epollout = EPOLLOUT;
const uint32_t vcshim_epollerr = EPOLLERR;
const uint32_t vcshim_epollhup = EPOLLHUP;
const uint32_t vcshim_epollrdhup = EPOLLRDHUP;

int vcshim_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

static int ctl(int epfd, int op, int fd, uint32_t events, uint64_t data) {
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = events;
    ev.data.u64 = data;
    return epoll_ctl(epfd, op, fd, &ev);
}
int vcshim_epoll_add(int epfd, int fd, uint32_t events, uint64_t data) { return ctl(epfd, EPOLL_CTL_ADD, fd, events, data); }
int vcshim_epoll_modify(int epfd, int fd, uint32_t events, uint64_t data) { return ctl(epfd, EPOLL_CTL_MOD, fd, events, data); }
int vcshim_epoll_remove(int epfd, int fd) { return ctl(epfd, EPOLL_CTL_DEL, fd, 0, 0); }

int vcshim_epoll_wait(int epfd, struct vcshim_epoll_event *out, int max, int timeout_ms) {
    struct epoll_event evs[1024];
    if (max > 1024) max = 1024;
    int n = epoll_wait(epfd, evs, max, timeout_ms);
    for (int i = 0; i < n; i++) {
        out[i].events = evs[i].events;
        out[i].data = evs[i].data.u64;
    }
    return n;
}

int vcshim_recvmmsg(int fd, struct vcshim_mmsghdr *msgs, unsigned int n, int flags) {
    return recvmmsg(fd, (struct mmsghdr *)msgs, n, flags, NULL);
}
int vcshim_sendmmsg(int fd, struct vcshim_mmsghdr *msgs, unsigned int n, int flags) {
    return sendmmsg(fd, (struct mmsghdr *)msgs, n, flags);
}

unsigned int vcshim_timestamp_control_size(void) { return CMSG_SPACE(sizeof(struct timespec)); }

int vcshim_enable_timestampns(int fd) {
    int on = 1;
    return setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);
}

uint64_t vcshim_timestampns(const struct msghdr *msg) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR((struct msghdr *)msg); c; c = CMSG_NXTHDR((struct msghdr *)msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS && c->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(c), sizeof ts);
            return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        }
    }
    return 0;
}

int vcshim_timerfd_create(int nonblocking) {
    return timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | (nonblocking ? TFD_NONBLOCK : 0));
}

int vcshim_timerfd_arm_abs(int fd, uint64_t at_ns) {
    struct itimerspec t;
    memset(&t, 0, sizeof t);
    t.it_value.tv_sec = (time_t)(at_ns / 1000000000ull);
    t.it_value.tv_nsec = (long)(at_ns % 1000000000ull);
    return timerfd_settime(fd, TFD_TIMER_ABSTIME, &t, NULL);
}

int vcshim_timerfd_wait(int fd) {
    uint64_t expirations;
    ssize_t n = read(fd, &expirations, sizeof expirations);
    return n == (ssize_t)sizeof expirations ? 0 : -1;
}
