/* CLinux: glibc GNU extensions Swift's Glibc module hides (no _GNU_SOURCE there). */
#ifndef VOICECAT_CLINUX_H
#define VOICECAT_CLINUX_H

struct sockaddr;
/* accept4(2) with flags (SOCK_CLOEXEC), a GNU extension */
int vcshim_accept4(int fd, struct sockaddr *addr, unsigned int *len, int flags);
/* pipe2(2) with flags (O_NONBLOCK|O_CLOEXEC), a GNU extension */
int vcshim_pipe2(int fds[2], int flags);
/* pthread_setname_np on the calling thread (name truncated to 15 bytes), a GNU extension */
void vcshim_set_thread_name(const char *name);

#endif
