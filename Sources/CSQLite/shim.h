// The system SQLite (libsqlite3-dev on Debian; the SDK's on Apple platforms): the client's
// local tier keeps its copies in a file with it.
#include <sqlite3.h>
