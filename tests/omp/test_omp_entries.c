/* Every entry point the OpenMP runtime lists as unsupported ends the calling program
 * with "lockstep-omp: NAME is not supported" and exit status 3: called through dlsym,
 * in a child per entry. The entry points gcc 13 and 14 emit, which this machine's
 * libgomp lacks, behave as their specification says. Usage: test_omp_entries LIB */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/check.h"

static const char *const names[] = {
#define LS_UNSUPPORTED(name) #name,
#define LS_UNSUPPORTED_TWICE(name) #name,
#include "../../src/omp/unsupported.def"
};

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "%s: not exported\n", name);
        exit(1);
    }
    return p;
}

static int (*in_explicit)(void);

static void task_body(void *data)
{
    **(int **)data = in_explicit();
}

/* gcc 13's and 14's entry points (GOMP_5.1.1, GOMP_5.1.2, OMP_5.1.1, OMP_5.2) */
static void newer_entries(void *lib)
{
    in_explicit = (int (*)(void))sym(lib, "omp_in_explicit_task");
    void (*task)(void (*)(void *), void *, void (*)(void *, void *), long, long, bool, unsigned,
                 void **, int, void *) = sym(lib, "GOMP_task");
    CHECK(in_explicit() == 0);
    int seen = -1, *at = &seen;
    task(task_body, &at, NULL, sizeof at, sizeof at, false, 0, NULL, 0, NULL);
    CHECK(seen == 1);

    void *(*galloc)(size_t, size_t, uintptr_t) = sym(lib, "GOMP_alloc");
    void (*gfree)(void *, uintptr_t) = sym(lib, "GOMP_free");
    void (*add)(void *) = sym(lib, "GOMP_add_alloc");
    bool (*is)(void *) = sym(lib, "GOMP_is_alloc");
    void *p = galloc(64, 100, 1), *q = malloc(8);
    CHECK(p && ((uintptr_t)p & 63) == 0);
    add(p);
    CHECK(is(p) && is(p) && !is(q));
    gfree(p, 1);
    CHECK(!is(p)); /* freed: forgotten */
    free(q);

    int x = 7, y = 0;
    void *(*mapped)(const void *, int) = sym(lib, "omp_get_mapped_ptr");
    int (*accessible)(const void *, size_t, int) = sym(lib, "omp_target_is_accessible");
    void *(*indirect)(void *) = sym(lib, "GOMP_target_map_indirect_ptr");
    int (*copy)(void *, const void *, size_t, size_t, size_t, int, int, int, void *) =
        sym(lib, "omp_target_memcpy_async");
    CHECK(mapped(&x, 0) == &x && mapped(&x, 5) == NULL);
    CHECK(accessible(&x, sizeof x, 0) == 1 && accessible(&x, sizeof x, 5) == 0);
    CHECK(indirect(&x) == &x);
    CHECK(copy(&y, &x, sizeof x, 0, 0, 0, 0, 0, NULL) == 0 && y == 7);
    CHECK(copy(&y, &x, sizeof x, 0, 0, 3, 0, 0, NULL) != 0);

    /* outside any region it neither waits nor fails */
    void (*nowait)(void **) = sym(lib, "GOMP_taskwait_depend_nowait");
    void *deps[3] = {(void *)1, (void *)1, &x};
    nowait(deps);
}

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
    newer_entries(lib);
    printf("%zu unsupported entries fail by name; gcc 13/14's entries behave\n", n);
    return 0;
}
