#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <unistd.h>
#include <fcntl.h>
#include <time.h>

// Glibc's Swift module hides accept4 (it needs _GNU_SOURCE); declare it here.
extern int accept4(int sockfd, struct sockaddr *addr, socklen_t *addrlen, int flags);
