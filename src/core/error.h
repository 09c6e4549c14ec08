/* Internal error helpers. Every public function that fails calls one of these
 * with its own name first in the message: amp_error(AMP_ERR_SHAPE,
 * "amp_matmul: [%s] @ [%s]: inner dimensions %lld and %lld differ", ...). */
#ifndef AMP_CORE_ERROR_H
#define AMP_CORE_ERROR_H

#include "amp/base.h"

#if defined(__GNUC__)
#define AMP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define AMP_PRINTF(a, b)
#endif

/* Records the message for this thread and returns st. */
amp_status amp_error(amp_status st, const char *fmt, ...) AMP_PRINTF(2, 3);
/* Same, returns NULL (for functions returning pointers). */
void *amp_error_null(amp_status st, const char *fmt, ...) AMP_PRINTF(2, 3);

#define AMP_UNUSED(x) ((void)(x))

#endif
