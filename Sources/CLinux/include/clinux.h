/* CLinux: glibc GNU extensions and Linux-only calls Swift's Glibc module hides (it is
 * built without _GNU_SOURCE and does not include <sys/epoll.h>). */
#ifndef VOICECAT_CLINUX_H
#define VOICECAT_CLINUX_H

#include <stdint.h>
#include <sys/socket.h>

struct sockaddr;
/* accept4(2) with flags (SOCK_CLOEXEC), a GNU extension */
int vcshim_accept4(int fd, struct sockaddr *addr, unsigned int *len, int flags);
/* eventfd(2), non-blocking and close-on-exec (<sys/eventfd.h> is not in Swift's Glibc module) */
int vcshim_eventfd(void);
/* pthread_setname_np on the calling thread (name truncated to 15 bytes), a GNU extension */
void vcshim_set_thread_name(const char *name);
/* sched_setaffinity(2) of the calling thread (threads it creates later inherit it) to
 * the `count` CPUs in `cpus`, a GNU extension; 0, or -1 with errno. For benchmarks that
 * must run two measured threads on the same CPU; the library itself never pins. */
int vcshim_pin_thread_to_cpus(const int *cpus, int count);
/* The CPUs the calling thread may run on (sched_getaffinity), in order, at most `max`
 * of them into `out`: how many, or -1 with errno. */
int vcshim_allowed_cpus(int *out, int max);
/* Bytes a TCP socket's kernel send queue still holds, not acknowledged by the peer
 * (ioctl SIOCOUTQ; ioctl is variadic, so Swift cannot call it), or -1 */
int vcshim_unacknowledged_bytes(int fd);

/* epoll(7) is Linux-only and its struct epoll_event is packed on x86-64; these pass
 * through with an unpacked event so Swift can read it. */
struct vcshim_epoll_event {
    uint32_t events;
    uint64_t data;
};
extern const uint32_t vcshim_epollin;
extern const uint32_t vcshim_epollout;
extern const uint32_t vcshim_epollerr;
extern const uint32_t vcshim_epollhup;
extern const uint32_t vcshim_epollrdhup;
/* epoll_create1(EPOLL_CLOEXEC) */
int vcshim_epoll_create(void);
/* epoll_ctl(2) EPOLL_CTL_ADD with an event mask and a 64-bit cookie */
int vcshim_epoll_add(int epfd, int fd, uint32_t events, uint64_t data);
/* epoll_ctl(2) EPOLL_CTL_MOD */
int vcshim_epoll_modify(int epfd, int fd, uint32_t events, uint64_t data);
/* epoll_ctl(2) EPOLL_CTL_DEL */
int vcshim_epoll_remove(int epfd, int fd);
/* epoll_wait(2) into at most `max` unpacked events (at most 1024 per call) */
int vcshim_epoll_wait(int epfd, struct vcshim_epoll_event *out, int max, int timeout_ms);

/* struct mmsghdr (a GNU extension) with the same layout, for recvmmsg/sendmmsg. */
struct vcshim_mmsghdr {
    struct msghdr msg_hdr;
    unsigned int msg_len;
};
/* recvmmsg(2), a GNU extension: up to `n` datagrams in one call (MSG_DONTWAIT in flags) */
int vcshim_recvmmsg(int fd, struct vcshim_mmsghdr *msgs, unsigned int n, int flags);
/* sendmmsg(2), a GNU extension: up to `n` datagrams in one call */
int vcshim_sendmmsg(int fd, struct vcshim_mmsghdr *msgs, unsigned int n, int flags);

/* Bytes of ancillary data one received datagram's kernel timestamp needs
 * (CMSG_SPACE(sizeof(struct timespec)); CMSG_* are macros Swift cannot use). */
unsigned int vcshim_timestamp_control_size(void);
/* setsockopt SO_TIMESTAMPNS: the kernel stamps each received datagram (CLOCK_REALTIME);
 * the option's name is a macro glibc defines conditionally, so Swift cannot see it */
int vcshim_enable_timestampns(int fd);
/* The SCM_TIMESTAMPNS of a received message as nanoseconds since the epoch, or 0. */
uint64_t vcshim_timestampns(const struct msghdr *msg);

/* timerfd(2) on CLOCK_MONOTONIC (<sys/timerfd.h> is not in Swift's Glibc module):
 * create with TFD_CLOEXEC (blocking reads; with `nonblocking`, TFD_NONBLOCK: for a
 * timer watched by poll); arm one-shot at an absolute time in ns (0: disarm; a time
 * already past expires at once); wait for the expiry (a read of the expiry count,
 * blocking unless created non-blocking; -1 with errno on failure, EINTR and EAGAIN
 * included). */
int vcshim_timerfd_create(int nonblocking);
int vcshim_timerfd_arm_abs(int fd, uint64_t at_ns);
int vcshim_timerfd_wait(int fd);

#endif
