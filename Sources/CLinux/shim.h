// Only what Glibc's Swift module does not expose. No _GNU_SOURCE here: it renames fd_set's
// field (fds_bits vs __fds_bits), and clang then finds two differing definitions of fd_set
// in this module and Dispatch's. Socket headers stay out for the same reason.
#include <sys/epoll.h>
#include <sys/eventfd.h>

struct sockaddr;
// Glibc's Swift module hides accept4 (declared only under _GNU_SOURCE); socklen_t is unsigned int.
extern int accept4(int sockfd, struct sockaddr *addr, unsigned int *addrlen, int flags);

// Returning freed memory to the kernel (malloc_trim) and bounding glibc's arenas (mallopt).
#include <malloc.h>

// Closing every inherited descriptor in a spawned child (glibc 2.34+, declared only under
// _GNU_SOURCE): the embedded PostgreSQL must not hold the service's pipes and files open.
#include <spawn.h>
extern int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *actions, int from);
