/* Error strings and version. */
#include <string.h>
#include "lockstep/lockstep.h"

const char *lockstep_strerror(int code)
{
    if (code < 0)
        code = -code;
    switch (code) {
    case 0: return "success";
    case LOCKSTEP_EPEERDIED: return "a peer process died during a collective call";
    case LOCKSTEP_EMISMATCH: return "participants called a collective with different arguments";
    case LOCKSTEP_EBADFILE: return "malformed model file";
    case LOCKSTEP_EABORTED: return "graph run aborted";
    case LOCKSTEP_EMPI: return "an MPI call failed";
    case LOCKSTEP_EFORKED:
        return "communicator made before fork(): its rank belongs to the parent; create a new one in the child";
    case LOCKSTEP_EPEERINVAL:
        return "another rank passed invalid arguments to this collective: the call did nothing on any rank";
    default: return strerror(code);
    }
}

const char *lockstep_version(void)
{
    return LOCKSTEP_VERSION_STRING;
}
