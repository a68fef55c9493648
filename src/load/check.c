/* Value checks for loaded tensors (lockstep_load_params.check): NaN and Inf in float
 * tensors, and in the scales of quantized ggml blocks. Keyed by the type name, which
 * both formats share for the float types ("F32", "F16", "BF16", "F64"). */
#include <string.h>

#include "load_impl.h"

/* Where the scales sit in one block: up to four fields. */
struct unit {
    const char *name;
    unsigned bytes;          /* element or block size */
    unsigned kind;           /* 0 none, 2 f16/bf16-like 16-bit, 4 f32, 8 f64, 1 8-bit float,
                                3 IQ1_M (an f16 spread over the top nibbles of 4 words) */
    unsigned n_scales, at[4];
    unsigned short mask16;   /* 16-bit: exponent mask (F16 0x7c00, BF16 0x7f80) */
    unsigned char mask8;     /* 8-bit: the all-ones pattern that means NaN/Inf */
};

static const struct unit units[] = {
    {"F32", 4, 4, 1, {0}, 0, 0},          {"F64", 8, 8, 1, {0}, 0, 0},
    {"F16", 2, 2, 1, {0}, 0x7c00, 0},     {"BF16", 2, 2, 1, {0}, 0x7f80, 0},
    {"F8_E4M3", 1, 1, 1, {0}, 0, 0x7f},   {"F8_E5M2", 1, 1, 1, {0}, 0, 0x7c},
    {"Q4_0", 18, 2, 1, {0}, 0x7c00, 0},   {"Q4_1", 20, 2, 2, {0, 2}, 0x7c00, 0},
    {"Q5_0", 22, 2, 1, {0}, 0x7c00, 0},   {"Q5_1", 24, 2, 2, {0, 2}, 0x7c00, 0},
    {"Q8_0", 34, 2, 1, {0}, 0x7c00, 0},   {"Q8_1", 40, 4, 2, {0, 4}, 0, 0},
    {"Q2_K", 84, 2, 2, {80, 82}, 0x7c00, 0}, {"Q3_K", 110, 2, 1, {108}, 0x7c00, 0},
    {"Q4_K", 144, 2, 2, {0, 2}, 0x7c00, 0},  {"Q5_K", 176, 2, 2, {0, 2}, 0x7c00, 0},
    {"Q6_K", 210, 2, 1, {208}, 0x7c00, 0},   {"Q8_K", 292, 4, 1, {0}, 0, 0},
    {"IQ2_XXS", 66, 2, 1, {0}, 0x7c00, 0},   {"IQ2_XS", 74, 2, 1, {0}, 0x7c00, 0},
    {"IQ3_XXS", 98, 2, 1, {0}, 0x7c00, 0},   {"IQ1_S", 50, 2, 1, {0}, 0x7c00, 0},
    {"IQ4_NL", 18, 2, 1, {0}, 0x7c00, 0},    {"IQ3_S", 110, 2, 1, {0}, 0x7c00, 0},
    {"IQ2_S", 82, 2, 1, {0}, 0x7c00, 0},     {"IQ4_XS", 136, 2, 1, {0}, 0x7c00, 0},
    {"TQ1_0", 54, 2, 1, {52}, 0x7c00, 0},    {"TQ2_0", 66, 2, 1, {64}, 0x7c00, 0},
    {"Q1_0", 18, 2, 1, {0}, 0x7c00, 0},
    /* IQ1_M: qs[32] qh[16] then four 16-bit words whose top nibbles, lowest word
     * first, form the block's f16 scale */
    {"IQ1_M", 56, 3, 1, {48}, 0x7c00, 0},
    /* MXFP4: one E8M0 exponent byte (0xff is NaN) then 16 bytes of E2M1 pairs */
    {"MXFP4", 17, 1, 1, {0}, 0, 0xff},
    /* NVFP4: four unsigned E4M3 scales, one per 16 elements (0x7f is NaN; no Inf) */
    {"NVFP4", 36, 1, 4, {0, 1, 2, 3}, 0, 0x7f},
};

static const struct unit *find(const char *type_name)
{
    for (unsigned i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(units[i].name, type_name) == 0)
            return &units[i];
    return NULL;
}

unsigned ls_check_unit(const char *type_name)
{
    const struct unit *u = find(type_name);
    return u ? u->bytes : 1;
}

static unsigned le16(const unsigned char *q)
{
    return (unsigned)q[0] | (unsigned)q[1] << 8;
}

/* IQ1_M's f16 scale: the top nibble of each of its four 16-bit scale words, lowest
 * word in the lowest nibble. */
static unsigned iq1m_scale(const unsigned char *q)
{
    return (le16(q) >> 12) | ((le16(q + 2) >> 8) & 0xf0u) | ((le16(q + 4) >> 4) & 0xf00u) |
           (le16(q + 6) & 0xf000u);
}

static int bad_at(const struct unit *u, const unsigned char *p)
{
    for (unsigned k = 0; k < u->n_scales; k++) {
        const unsigned char *q = p + u->at[k];
        switch (u->kind) {
        case 1:
            if ((q[0] & u->mask8) == u->mask8)
                return 1;
            break;
        case 2:
        case 3: {
            unsigned v = u->kind == 2 ? le16(q) : iq1m_scale(q);
            if ((v & u->mask16) == u->mask16)
                return 1;
            break;
        }
        case 4: {
            uint32_t v;
            memcpy(&v, q, 4);
            if ((v & 0x7f800000u) == 0x7f800000u)
                return 1;
            break;
        }
        case 8: {
            uint64_t v;
            memcpy(&v, q, 8);
            if ((v & 0x7ff0000000000000ull) == 0x7ff0000000000000ull)
                return 1;
            break;
        }
        }
    }
    return 0;
}

int ls_check_bytes(const char *type_name, const unsigned char *p, uint64_t n, uint64_t *where)
{
    const struct unit *u = find(type_name);
    if (!u)
        return 0;
    uint64_t whole = n - n % u->bytes;
    /* Plain float elements: OR a whole stretch (vectorizes), look closer only when
     * the stretch holds a bad value. */
    uint64_t i = 0;
    if (u->bytes == 4 && u->kind == 4) {
        for (; i + 4096 <= whole; i += 4096) {
            unsigned any = 0;
            for (unsigned k = 0; k < 4096; k += 4) {
                uint32_t v;
                memcpy(&v, p + i + k, 4);
                any |= (v & 0x7f800000u) == 0x7f800000u;
            }
            if (any)
                break;
        }
    } else if (u->bytes == 2 && u->kind == 2) {
        for (; i + 4096 <= whole; i += 4096) {
            unsigned any = 0;
            for (unsigned k = 0; k < 4096; k += 2) {
                uint16_t v;
                memcpy(&v, p + i + k, 2);
                any |= (v & u->mask16) == u->mask16;
            }
            if (any)
                break;
        }
    }
    for (; i < whole; i += u->bytes)
        if (bad_at(u, p + i)) {
            *where = i;
            return -1;
        }
    return 0;
}
