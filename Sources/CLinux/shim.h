#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
// Only what Glibc's Swift module does not expose; everything else comes from Glibc
// (including more headers here makes clang see two differing definitions of one type).
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

// Glibc's Swift module hides accept4 (it needs _GNU_SOURCE); declare it here.
extern int accept4(int sockfd, struct sockaddr *addr, socklen_t *addrlen, int flags);
