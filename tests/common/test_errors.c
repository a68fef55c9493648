/* Error strings, version, and the lockstep_ prefix on the library's own codes. */
#include <errno.h>

#include "lockstep/lockstep.h"
#include "check.h"

int main(void)
{
    CHECK(strcmp(lockstep_version(), LOCKSTEP_VERSION_STRING) == 0);
    CHECK(strstr(lockstep_strerror(-LOCKSTEP_EPEERDIED), "peer") != NULL);
    CHECK(strstr(lockstep_strerror(LOCKSTEP_EABORTED), "abort") != NULL);
    CHECK(strstr(lockstep_strerror(LOCKSTEP_EMPI), "MPI") != NULL);
    CHECK(strstr(lockstep_strerror(-LOCKSTEP_EFORKED), "fork") != NULL);
    CHECK(strstr(lockstep_strerror(-LOCKSTEP_EPEERINVAL), "invalid arguments") != NULL);
    CHECK(strcmp(lockstep_strerror(-EINVAL), strerror(EINVAL)) == 0);
    CHECK(strcmp(lockstep_strerror(0), "success") == 0);
    CHECK(lockstep_strerror(-999999) != NULL);
    CHECK(LOCKSTEP_EPEERDIED > 4095); /* never an errno */
    return 0;
}
