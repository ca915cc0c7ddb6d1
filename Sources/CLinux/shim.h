#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
// Only what Glibc's Swift module does not expose. Socket headers stay out: including them
// here gives clang two differing definitions of fd_set (seen under -sanitize=thread).
#include <sys/epoll.h>
#include <sys/eventfd.h>

struct sockaddr;
// Glibc's Swift module hides accept4 (it needs _GNU_SOURCE); socklen_t is unsigned int.
extern int accept4(int sockfd, struct sockaddr *addr, unsigned int *addrlen, int flags);
