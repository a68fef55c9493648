/* lockstep — umbrella header: version, error codes, and every family's header.
 *
 * Error convention: every public function returns 0 (or a non-negative count) on
 * success and a negative errno on failure; functions returning pointers return NULL
 * and set errno. Protocol errors that have no errno use the LOCKSTEP_E* codes
 * below (all below -4096, so they never collide with a kernel errno). */
#ifndef LOCKSTEP_H
#define LOCKSTEP_H

#define LOCKSTEP_VERSION_MAJOR 0
#define LOCKSTEP_VERSION_MINOR 1
#define LOCKSTEP_VERSION_PATCH 0
#define LOCKSTEP_VERSION_STRING "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

/* Codes for failures that are not an errno. Returned negated, like errnos. */
enum {
    LOCKSTEP_EPEERDIED = 5001, /* a peer process exited or was killed mid-call */
    LOCKSTEP_EMISMATCH = 5002, /* participants disagree on a collective's arguments */
    LOCKSTEP_EBADFILE  = 5003, /* a model file is malformed */
    LOCKSTEP_EABORTED  = 5004, /* a graph run was aborted by a node or by lockstep_pool_abort */
    LOCKSTEP_EMPI      = 5005, /* an MPI call failed (lockstep/comm_mpi.h) */
    LOCKSTEP_EFORKED   = 5006, /* a communicator used in a process forked after its
                                  creation: its rank is the parent's */
    LOCKSTEP_EPEERINVAL = 5007 /* another rank's arguments to this collective were
                                  invalid: the call did nothing on any rank, and the
                                  communicator goes on (lockstep/comm.h) */
};

/* A static, human-readable description of a code (negative or positive). Never NULL. */
const char *lockstep_strerror(int code);

/* The runtime library version as "MAJOR.MINOR.PATCH". */
const char *lockstep_version(void);

#ifdef __cplusplus
}
#endif

#include "lockstep/wait.h"
#include "lockstep/barrier.h"
#include "lockstep/pool.h"
#include "lockstep/comm.h"
#include "lockstep/load.h"

#endif
