/* Every entry point the OpenMP runtime lists as unsupported ends the calling program
 * with "lockstep-omp: NAME is not supported" and exit status 3: called through dlsym,
 * in a child per entry. Usage: test_omp_entries LIB */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/check.h"

static const char *const names[] = {
#define LS_UNSUPPORTED(name) #name,
#define LS_UNSUPPORTED_TWICE(name) #name,
#include "../../src/omp/unsupported.def"
};

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    watchdog(120);
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    size_t n = sizeof names / sizeof names[0];
    for (size_t i = 0; i < n; i++) {
        void (*fn)(void) = (void (*)(void))dlsym(lib, names[i]);
        if (!fn) {
            fprintf(stderr, "%s: not exported\n", names[i]);
            return 1;
        }
        int pipefd[2];
        CHECK(pipe(pipefd) == 0);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            dup2(pipefd[1], 2);
            fn();
            _exit(0); /* not reached when the entry fails as it should */
        }
        close(pipefd[1]);
        char buf[256] = {0};
        size_t got = 0;
        ssize_t r;
        while (got < sizeof buf - 1 && (r = read(pipefd[0], buf + got, sizeof buf - 1 - got)) > 0)
            got += (size_t)r;
        close(pipefd[0]);
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        char want[200];
        snprintf(want, sizeof want, "lockstep-omp: %s is not supported\n", names[i]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 3 || strcmp(buf, want) != 0) {
            fprintf(stderr, "%s: status %d, stderr '%s'\n", names[i], status, buf);
            return 1;
        }
    }
    printf("%zu unsupported entries fail by name\n", n);
    return 0;
}
