/* Shared by the corpus: the tests' CHECK and watchdog (tests/common/check.h). Each
 * program prints one line, "ok <checksum>", whose value does not depend on the thread
 * count or the runtime. */
#ifndef CORPUS_CHECK_H
#define CORPUS_CHECK_H
#include "../../common/check.h"

static inline void corpus_start(void)
{
    watchdog(60);
}
#endif
