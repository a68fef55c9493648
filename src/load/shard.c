/* Tensor-parallel shard plans: which part of a tensor a rank holds, and where its bytes
 * lie in the file. A part split along dimension d is a range of indices along d; in
 * C order that is one range of bytes per index of the dimensions outside d (the runs),
 * each a fixed stride apart, so the loader reads only those ranges. */
#define _GNU_SOURCE
#include <errno.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "load_impl.h"

__attribute__((format(printf, 2, 3)))
static int refuse(lockstep_load_error_t *err, const char *fmt, ...)
{
    if (err) {
        err->code = -EINVAL;
        err->offset = 0;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

static int split_dim(const lockstep_shard_t *plan, const char *name, const char **pattern)
{
    for (size_t k = 0; k < plan->n_rules; k++)
        if (fnmatch(plan->rules[k].pattern, name, 0) == 0) {
            *pattern = plan->rules[k].pattern;
            return plan->rules[k].dim;
        }
    return -1;
}

int ls_shard_check(const lockstep_shard_t *plan, lockstep_load_error_t *err)
{
    if (plan->world < 1 || plan->rank < 0 || plan->rank >= plan->world)
        return refuse(err, "shard plan: rank %d of world %d (need world >= 1, 0 <= rank < world)",
                      plan->rank, plan->world);
    if (plan->n_rules && !plan->rules)
        return refuse(err, "shard plan: n_rules %zu but no rules", plan->n_rules);
    for (size_t k = 0; k < plan->n_rules; k++)
        if (!plan->rules[k].pattern || plan->rules[k].dim < -1)
            return refuse(err, "shard plan: rule %zu has no pattern or a dim below -1", k);
    return 0;
}

int lockstep_shard_part(const lockstep_model_t *m, size_t i, const lockstep_shard_t *plan,
                        lockstep_shard_part_t *out, lockstep_load_error_t *err)
{
    if (!m || !out || i >= m->n_tensors)
        return refuse(err, "no model, no output, or tensor index %zu out of range", i);
    const lockstep_tensor_info_t *t = &m->tensors[i];
    uint64_t ue, ub; /* elements and bytes of the type's smallest whole unit */
    int known = m->format == LOCKSTEP_FORMAT_GGUF ? ls_gguf_unit(t->type, &ue, &ub) : ls_st_unit(t->type, &ue, &ub);
    if (known != 0)
        return refuse(err, "tensor \"%s\" has a type (%s) without a known size", t->name, t->type_name);
    memset(out, 0, sizeof *out);
    out->n_dims = t->n_dims;
    for (uint32_t k = 0; k < t->n_dims; k++)
        out->shape[k] = m->format == LOCKSTEP_FORMAT_GGUF ? t->dims[t->n_dims - 1 - k] : t->dims[k];
    out->dim = -1;
    out->size = t->size;
    out->offset = t->offset;
    out->runs = t->size ? 1 : 0;
    out->run = out->stride = t->size;
    if (!plan)
        return 0;
    int rc = ls_shard_check(plan, err);
    if (rc)
        return rc;
    const char *pattern = NULL;
    int d = split_dim(plan, t->name, &pattern);
    if (d < 0)
        return 0;
    if ((uint32_t)d >= t->n_dims)
        return refuse(err, "shard plan: \"%s\" splits dimension %d, but tensor \"%s\" has %u", pattern, d,
                      t->name, t->n_dims);
    uint64_t s = out->shape[d], c = s / (uint64_t)plan->world + (s % (uint64_t)plan->world != 0);
    uint64_t start = (uint64_t)plan->rank * c < s ? (uint64_t)plan->rank * c : s;
    uint64_t count = s - start < c ? s - start : c;
    /* elements inside one index of d, and outside d: both fit, as the tensor's size did */
    uint64_t inner = 1, outer = 1;
    for (uint32_t k = (uint32_t)d + 1; k < t->n_dims; k++)
        inner *= out->shape[k];
    for (uint32_t k = 0; k < (uint32_t)d; k++)
        outer *= out->shape[k];
    if ((start * inner) % ue || (count * inner) % ue)
        return refuse(err, "shard plan: \"%s\" splits tensor \"%s\" (%s) at index %llu of dimension %d, "
                      "inside a %llu-element block", pattern, t->name, t->type_name,
                      (unsigned long long)((start * inner) % ue ? start : start + count), d,
                      (unsigned long long)ue);
    out->dim = d;
    out->start = start;
    out->count = count;
    out->shape[d] = count;
    out->run = count * inner / ue * ub;
    out->stride = s * inner / ue * ub;
    out->offset = t->offset + start * inner / ue * ub;
    out->size = outer * out->run;
    out->runs = out->size ? outer : 0;
    if (out->runs && (outer == 1 || out->run == out->stride)) { /* one range */
        out->runs = 1;
        out->run = out->stride = out->size;
    }
    return 0;
}
