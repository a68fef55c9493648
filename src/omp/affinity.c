/* The affinity format: OMP_AFFINITY_FORMAT, OMP_DISPLAY_AFFINITY and the routines that
 * set, read, capture and display it.
 *
 * A format is text with fields %[0.][size]type or %[0.][size]{name}: t team_num,
 * T num_teams, L nesting_level, n thread_num, N num_threads, a ancestor_tnum, H host,
 * P process_id, i native_thread_id, A thread_affinity; %% is a percent sign. A field is
 * left-justified in size columns, right-justified with '.', zero-padded with "0.".
 * An unknown field is copied as it stands. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "omp_impl.h"

static char *format; /* NULL: the default */
static const char default_format[] = "level %L thread %i affinity %A";

static char long_name(const char *name, size_t n);
LS_OMP_EXPORT void omp_display_affinity(const char *f);

static const char *current_format(void)
{
    const char *f = ls_load_acquire(&format);
    return f ? f : default_format;
}

/* Whether every field of f is known. */
static bool valid(const char *f)
{
    for (const char *p = strchr(f, '%'); p; p = strchr(p, '%')) {
        p++;
        if (*p == '%') {
            p++;
            continue;
        }
        if (p[0] == '0' && p[1] == '.')
            p += 2;
        else if (*p == '.')
            p++;
        while (*p >= '0' && *p <= '9')
            p++;
        if (*p == '{') {
            const char *end = strchr(p, '}');
            if (!end || !long_name(p + 1, (size_t)(end - p - 1)))
                return false;
            p = end + 1;
        } else if (!*p || !strchr("tTLnNaHPiA", *p)) {
            return false;
        } else {
            p++;
        }
    }
    return true;
}

int ls_omp_affinity_init(const char *env)
{
    if (!env)
        return 0;
    if (!valid(env))
        return -1;
    format = strdup(env);
    return 0;
}

void ls_omp_affinity_show(struct ls_omp_thread *t, int n)
{
    if (t->shown_n == n)
        return;
    t->shown_n = n;
    omp_display_affinity(NULL);
}

LS_OMP_EXPORT void omp_set_affinity_format(const char *f)
{
    char *copy = f ? strdup(f) : NULL;
    if (f && !copy)
        return;
    /* the old string is not freed: another thread may be formatting with it */
    ls_store_release(&format, copy);
}

/* Copy s into buf (size bytes, NUL-terminated, truncated); returns strlen(s). */
static size_t copy_out(char *buf, size_t size, const char *s, size_t len)
{
    if (buf && size) {
        size_t n = len < size - 1 ? len : size - 1;
        memcpy(buf, s, n);
        buf[n] = '\0';
    }
    return len;
}

LS_OMP_EXPORT size_t omp_get_affinity_format(char *buf, size_t size)
{
    const char *f = current_format();
    return copy_out(buf, size, f, strlen(f));
}

/* A growing string. */
struct out {
    char *s;
    size_t len, cap;
};

static void put(struct out *o, const char *s, size_t n)
{
    if (o->len + n + 1 > o->cap) {
        size_t cap = (o->len + n + 1) * 2;
        char *p = realloc(o->s, cap);
        if (!p)
            return;
        o->s = p;
        o->cap = cap;
    }
    memcpy(o->s + o->len, s, n);
    o->len += n;
    o->s[o->len] = '\0';
}

static void cpus_text(char *buf, size_t size)
{
    cpu_set_t set;
    buf[0] = '\0';
    if (pthread_getaffinity_np(pthread_self(), sizeof set, &set) != 0)
        return;
    size_t at = 0;
    for (int c = 0; c < CPU_SETSIZE && at + 24 < size; c++) {
        if (!CPU_ISSET(c, &set))
            continue;
        int z = c;
        while (z + 1 < CPU_SETSIZE && CPU_ISSET(z + 1, &set))
            z++;
        at += (size_t)snprintf(buf + at, size - at, at ? ",%d" : "%d", c);
        if (z > c)
            at += (size_t)snprintf(buf + at, size - at, "-%d", z);
        c = z;
    }
}

/* One field's value as text; false for an unknown field. */
static bool field(char type, char *buf, size_t size)
{
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_team *team = t->c.team;
    long v;
    switch (type) {
    case 't': v = t->c.league_num; break;
    case 'T': v = t->c.league_size > 0 ? t->c.league_size : 1; break;
    case 'L': v = team ? team->level : 0; break;
    case 'n': v = team ? t->c.tid : 0; break;
    case 'N': v = team ? team->n : 1; break;
    case 'a': { /* omp_get_ancestor_thread_num(level - 1) */
        int up = (team ? team->level : 0) - 1, id = 0;
        v = up == 0 ? 0 : ls_omp_ancestor(up, &id) ? id : -1;
        break;
    }
    case 'P': v = (long)getpid(); break;
    case 'i': v = (long)gettid(); break;
    case 'H':
        if (gethostname(buf, size) != 0)
            buf[0] = '\0';
        buf[size - 1] = '\0';
        return true;
    case 'A':
        cpus_text(buf, size);
        return true;
    default:
        return false;
    }
    snprintf(buf, size, "%ld", v);
    return true;
}

static char long_name(const char *name, size_t n)
{
    static const struct {
        const char *name;
        char type;
    } names[] = {{"team_num", 't'}, {"num_teams", 'T'}, {"nesting_level", 'L'},
                 {"thread_num", 'n'}, {"num_threads", 'N'}, {"ancestor_tnum", 'a'},
                 {"host", 'H'}, {"process_id", 'P'}, {"native_thread_id", 'i'},
                 {"thread_affinity", 'A'}};
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i].name) == n && strncmp(names[i].name, name, n) == 0)
            return names[i].type;
    return 0;
}

static void expand(struct out *o, const char *f)
{
    while (*f) {
        const char *pct = strchr(f, '%');
        if (!pct) {
            put(o, f, strlen(f));
            return;
        }
        put(o, f, (size_t)(pct - f));
        const char *p = pct + 1;
        if (*p == '%') {
            put(o, "%", 1);
            f = p + 1;
            continue;
        }
        bool zero = false, right = false;
        if (p[0] == '0' && p[1] == '.') {
            zero = right = true;
            p += 2;
        } else if (*p == '.') {
            right = true;
            p++;
        }
        size_t width = 0;
        while (*p >= '0' && *p <= '9')
            width = width * 10 + (size_t)(*p++ - '0');
        char type = 0;
        if (*p == '{') {
            const char *end = strchr(p, '}');
            if (end) {
                type = long_name(p + 1, (size_t)(end - p - 1));
                p = end;
            }
        } else {
            type = *p;
        }
        char val[1024];
        if (!type || !*p || !field(type, val, sizeof val)) { /* unknown: as it stands */
            put(o, pct, 1);
            f = pct + 1;
            continue;
        }
        size_t len = strlen(val);
        if (len < width && right) {
            const char *digits = val;
            if (zero && val[0] == '-') { /* the sign before the zeros */
                put(o, "-", 1);
                digits++;
            }
            for (size_t k = len; k < width; k++)
                put(o, zero ? "0" : " ", 1);
            put(o, digits, strlen(digits));
        } else {
            put(o, val, len);
            for (size_t k = len; k < width; k++)
                put(o, " ", 1);
        }
        f = p + 1;
    }
}

LS_OMP_EXPORT size_t omp_capture_affinity(char *buf, size_t size, const char *f)
{
    struct out o = {0};
    expand(&o, f && *f ? f : current_format());
    size_t len = copy_out(buf, size, o.s ? o.s : "", o.len);
    free(o.s);
    return len;
}

LS_OMP_EXPORT void omp_display_affinity(const char *f)
{
    struct out o = {0};
    expand(&o, f && *f ? f : current_format());
    put(&o, "\n", 1);
    if (o.s)
        fputs(o.s, stderr);
    free(o.s);
}
