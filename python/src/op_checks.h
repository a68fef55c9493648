/* The torch ops' argument checks (op_checks.c). The checks write their message into
 * msg and touch no Python object, so the C++ kernels run them without the GIL. */
#ifndef LOCKSTEP_PY_OP_CHECKS_H
#define LOCKSTEP_PY_OP_CHECKS_H

#include <stddef.h>
#include <stdint.h>

#define LSP_CHECK_MSG 320 /* room for the longest message */

/* dim as an index into ndim dimensions (negative from the end): it, or -1 (ValueError) */
int lsp_check_dim(int64_t ndim, int64_t dim, const char *op, const char *name, char *msg, size_t len);
/* dimension dim, extent long, split into size equal parts: 0, or -1 (ValueError) */
int lsp_check_split(int64_t extent, int size, int64_t dim, const char *op, char *msg, size_t len);
/* a root among size ranks: it, or -1 (ValueError) */
int lsp_check_root(int64_t root, int size, char *msg, size_t len);
/* the messages of the failures found elsewhere: a tensor that requires grad
 * (RuntimeError), a dtype the collectives lack (TypeError), a handle bound to no
 * communicator (ValueError) */
void lsp_no_grad_message(const char *op, char *msg, size_t len);
void lsp_dtype_message(const char *what, const char *dtype, char *msg, size_t len);
void lsp_unbound_message(long long handle, char *msg, size_t len);

#endif
